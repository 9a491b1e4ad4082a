"""Which known secret files a shell glob would name.

The shell expands `cat /etc/shad?w` to `cat /etc/shadow` before the program runs, but the
guard sees the pattern: rules written for paths never meet the path. A glob is therefore
matched against the example secret paths of `guard.toml` (`[globs] secret_paths`), as the
shell would: component by component, `*` and `?` within one component, and a leading dot
matched only by a dot.
"""

from __future__ import annotations

import fnmatch

from otel_safety.analysis.pattern_cache import compiled

_META = frozenset("*?[")
# A home folder spelled out (`/root`, `/home/alice`, `/Users/*`): the examples spell it `~`.
_HOME = compiled(r"^(?:/root|/(?:home|Users)/[^/]+)(?=/)")


def is_glob(path: str) -> bool:
    return not _META.isdisjoint(path)


def named_by_glob(pattern: str, examples: tuple[str, ...]) -> list[str]:
    """The examples the glob would expand to. A relative glob may name the end of any
    example (the working directory is unknown) but must spell one character itself: `*`
    alone names every file, secret or not, and is left to other rules."""
    parts = pattern.split("/")
    absolute = pattern.startswith(("/", "~"))
    if not absolute and all(_META.issuperset(part) for part in parts):
        return []
    if absolute:
        pattern = _HOME.sub("~", pattern, count=1)
        parts = pattern.split("/")
    found = []
    for example in examples:
        names = example.split("/")
        if absolute:
            fits = len(names) == len(parts) and _components_fit(parts, names)
        else:
            fits = len(names) >= len(parts) and _components_fit(parts, names[-len(parts) :])
        if fits:
            found.append(example)
    return found


def _components_fit(parts: list[str], names: list[str]) -> bool:
    return all(_component_fits(part, name) for part, name in zip(parts, names, strict=True))


def _component_fits(part: str, name: str) -> bool:
    if name.startswith(".") and not part.startswith("."):
        return False  # the shell's globs pass over dotfiles unless the dot is written
    if not is_glob(part):
        return part == name
    return fnmatch.fnmatchcase(name, part.replace("[^", "[!"))
