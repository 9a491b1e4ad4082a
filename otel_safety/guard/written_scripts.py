"""Scripts an agent writes in one call and runs in a later one.

`write_file("/tmp/cleanup.sh", "rm -rf /")` then `bash /tmp/cleanup.sh`: each call alone
looks harmless, the guard sees the danger only when it remembers what was written. A script
is judged when it is written, as the call that runs it would run it; what it would do
(the rule hits) is remembered per conversation by path, not its text, and a later call that
runs that path carries those hits.
"""

from __future__ import annotations

import posixpath
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from otel_safety.analysis.calls.shell import SHELLS, SimpleCommand
from otel_safety.analysis.calls.tool_names import normalize_name
from otel_safety.conversation import ExpiringStore
from otel_safety.guard.verdict import RuleHit
from otel_safety.guard.view import INTERPRETERS, CallView

Judge = Callable[[str, str], list[RuleHit]]  # (kind: "shell" | "code", text) -> hits
Written = dict[str, tuple[RuleHit, ...]]  # path -> what the script written there would do

_SHELLS = SHELLS | {"source", "."}
_CODE = INTERPRETERS | {"pwsh"}
_INLINE = frozenset({"-c", "-e", "-m", "-", "--eval", "-command"})  # the program is no file
_SHELL_SUFFIXES = (".sh", ".bash", ".zsh", ".ksh", ".command")
_CODE_SUFFIXES = (".py", ".js", ".mjs", ".cjs", ".ts", ".rb", ".pl", ".php", ".ps1")
_PATHS_PER_CONVERSATION = 64


class WrittenScripts:
    """Per conversation, what each script written so far would do when run."""

    def __init__(self, *, ttl: float = 3600.0, max_conversations: int = 10_000) -> None:
        self._store: ExpiringStore[OrderedDict[str, tuple[RuleHit, ...]]] = ExpiringStore(
            ttl=ttl, max_entries=max_conversations
        )

    def check(
        self,
        conversation: str | None,
        view: CallView,
        arguments: Any,
        keys: Mapping[str, frozenset[str]],
        judge: Judge,
    ) -> tuple[list[RuleHit], Written]:
        """The hits of every script this call runs (written by an earlier call of the
        conversation or by this one: `cat > x.sh <<EOF ... EOF; ./x.sh`), each saying so; and
        what this call writes, judged, for `keep` once the call is let through. `keys`: the
        argument names of each kind (`[arguments]` in guard.toml)."""
        now: Written = {}
        for path, kind, text in _writes(view, arguments, keys):
            now[_normal(path)] = tuple(judge(kind, text))
        run = list(_runs(view.commands))
        if not run:
            return [], now
        with self._store.lock:
            earlier = self._store.get(conversation, OrderedDict) if conversation else {}
            # What this call writes is what runs, harmless or not, before an earlier write.
            looked_up = [(path, _lookup(now, path)) for path in run]
            found = [
                (path, hits)
                for path, in_now in looked_up
                if (hits := in_now if in_now is not None else _lookup(earlier, path))
            ]
        hits = [
            hit.model_copy(update={"reason": f"runs {path}, written earlier: {hit.reason}"})
            for path, path_hits in found
            for hit in path_hits
        ]
        return hits, now

    def keep(self, conversation: str | None, written: Written) -> None:
        """Remember what a call wrote (a script written again: the last write is what runs)."""
        if conversation is None or not written:
            return
        with self._store.lock:
            earlier = self._store.get(conversation, OrderedDict)
            for path, hits in written.items():
                earlier.pop(path, None)
                earlier[path] = hits
                while len(earlier) > _PATHS_PER_CONVERSATION:
                    earlier.popitem(last=False)


def _writes(
    view: CallView, arguments: Any, keys: Mapping[str, frozenset[str]]
) -> Iterator[tuple[str, str, str]]:
    """(path, kind, text) of each script the call writes: a file tool's path and content,
    or a shell command's output redirected to a file (`echo ... > x.sh`, a here-document)."""
    if "write_files" in view.categories and isinstance(arguments, Mapping):
        path = _first(arguments, keys["path"])
        text = _first(arguments, keys["body"] | keys["code"])
        if path and text and (kind := _kind(path, text)):
            yield path, kind, text
    for command in view.commands:
        text = command.stdin
        if text is None and posixpath.basename(command.program) in ("echo", "printf"):
            text = " ".join(a for a in command.args if not a.startswith("-"))
        if not text:
            continue
        targets = list(command.output_redirects)
        if posixpath.basename(command.program) == "tee":
            targets += [a for a in command.args if not a.startswith("-")]
        for path in targets:
            if kind := _kind(path, text):
                yield path, kind, text


def _runs(commands: list[SimpleCommand]) -> Iterator[str]:
    """The script files the commands run: `bash x.sh`, `python x.py`, `./x.sh`."""
    for command in commands:
        program = posixpath.basename(command.program)
        if program not in _SHELLS | _CODE and (
            "/" in command.program or program.lower().endswith(_SHELL_SUFFIXES + _CODE_SUFFIXES)
        ):  # `./deploy.sh`, which the parser reads as the program `deploy.sh`
            yield _normal(command.program)
            continue
        interpreter = program in _SHELLS or program.rstrip("0123456789.") in _CODE
        if not interpreter or any(a.lower() in _INLINE for a in command.args):
            continue
        operand = next((a for a in command.args if not a.startswith("-")), None)
        if operand:
            yield _normal(operand)


def _kind(path: str, text: str) -> str | None:
    """How a written file would run: as shell, as a program's source, or not at all (a
    note, a page, data)."""
    lowered = path.lower()
    first_line = text.lstrip()[:80].split("\n", 1)[0]
    if lowered.endswith(_SHELL_SUFFIXES) or (
        first_line.startswith("#!") and posixpath.basename(first_line.split()[0]) in _SHELLS
    ):
        return "shell"
    if lowered.endswith(_CODE_SUFFIXES) or first_line.startswith("#!"):
        return "code"
    return None


def _lookup(written: Mapping[str, tuple[RuleHit, ...]], path: str) -> tuple[RuleHit, ...] | None:
    """What a run path names: written under that path, or, when one of the two is relative
    (the working directory is unknown), under a path that ends the same way."""
    if path in written:
        return written[path]
    for known, hits in reversed(written.items()):
        if not (known.startswith("/") and path.startswith("/")) and _same_end(known, path):
            return hits
    return None


def _same_end(one: str, other: str) -> bool:
    shorter, longer = sorted((one, other), key=len)
    return longer == shorter or longer.endswith("/" + shorter.removeprefix("~/"))


def _normal(path: str) -> str:
    path = path.strip().strip("'\"")
    for home in ("$HOME/", "${HOME}/"):
        if path.startswith(home):
            path = "~/" + path[len(home) :]
    return posixpath.normpath(path) if path else path


def _first(arguments: Mapping[str, Any], names: frozenset[str]) -> str | None:
    """The first text value of an argument of one of these names (as the guard names them)."""
    return next(
        (
            value
            for key, value in arguments.items()
            if normalize_name(str(key)) in names and isinstance(value, str) and value.strip()
        ),
        None,
    )
