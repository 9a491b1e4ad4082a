"""Match the data file's rules, and the few checks that need more than a pattern, on a call."""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Iterator

import regex

from otel_safety.analysis.pattern_cache import compiled
from otel_safety.detectors.base import clip
from otel_safety.guard.data import RULE_KINDS, GuardData, Rule
from otel_safety.guard.globs import is_glob, named_by_glob
from otel_safety.guard.verdict import RuleHit
from otel_safety.guard.view import CallView

_MATCH_CHARS = 160
# What tells of a request as someone else's, before it in its sentence: "a note asking to",
# "the upload says to", "their special instructions ask us to report ... and".
_REPORTED_REQUEST = compiled(
    r"(?i)\b(?:note|notes|message|e-?mail|comment|upload|document|page|file|form|request|"
    r"instructions?|text|footer|memo|line|header)\b[^.!?\n]{0,60}\b(?:asking|asks|asked|telling|"
    r"tells|told|saying|says|instructing|instructs|requesting|requests|wants|wanted|ask)\b"
    r"[^.!?\n]{0,30}\b(?:to|that)\b[^.!?\n]{0,80}$"
)
_REPORT_REACH = 120
# Risk of a call with unread code, a command or SQL (blocks at the packaged block line, 70),
# and with other unread text (warns at the packaged warn line, 40).
_UNREAD_CODE_RISK = 75
_UNREAD_TEXT_RISK = 45
# Targets whose recursive removal destroys a system, a home or a whole working tree.
_ROOT_TARGETS = compiled(
    r"""^(?:/+\*?|/+\.\*?|~/?\*?|~\w*/?\*?|\$\{?HOME\}?/?\*?|\.{1,2}/?\*?|\*|\.\*|/\*/?\*?
        |/(?:home|Users|root|etc|usr|var|bin|sbin|lib|lib64|boot|opt|srv|mnt|media|dev|sys|proc|System|Library|Applications)/?\*?
        |/(?:home|Users)/[^/]+/?\*?|/var/(?:lib|log|www|backups)/?\*?|C:[\\/]?\*?)$""",
    regex.VERBOSE,
)
_HOME_CACHES = frozenset(
    {
        ".cache",
        ".npm",
        ".yarn",
        ".gradle",
        ".m2",
        ".pnpm-store",
        ".bun",
        ".cargo",
        ".rustup",
        ".nvm",
        ".pyenv",
        ".local",
        ".mypy_cache",
        ".pytest_cache",
        "tmp",
        ".tmp",
        "Library",
    }
)
_SCRATCH = compiled(r"^/(?:tmp|var/tmp|dev/shm|private/tmp|run/user/\d+)/")
_UNBOUNDED_SQL = compiled(
    r"^\s*(?:DELETE\s+FROM\s+\S+|UPDATE\s+\S+\s+SET\s+(?:(?!\bWHERE\b).)+)\s*$", regex.IGNORECASE
)


def match_rules(view: CallView, data: GuardData, role: str) -> list[RuleHit]:
    """Every rule that matches the call, strongest first; plus the programmatic checks."""
    candidates = _candidates(view, data)
    rules = data.rules
    hits = [
        hit
        for number in sorted(candidates.keys() | data.kindless)  # in file order, as ties sort
        if (hit := _match(rules[number], view, role, candidates.get(number, {}), data))
    ]
    hits.extend(_limit_hits(view, data, role))
    hits.extend(_tree_removals(view))
    hits.extend(_unbounded_sql(view.sql))
    hits.extend(_unread(view))
    return sorted(hits, key=lambda h: -h.risk)


def _candidates(view: CallView, data: GuardData) -> dict[int, dict[str, list]]:
    """Per rule and kind, the call's texts (in their order) that the rule's pattern may
    match: each text is read once by its kind's set, whatever the number of rules."""
    sources: dict[str, list] = {
        "tool": [view.name],
        "command": [c.line for c in view.commands],
        "pipe": view.pipes,
        "script": view.scripts,
        "sql": view.sql,
        "path": [(form, mode) for path, mode in view.paths for form in _path_forms(path, data)],
        "url": view.urls,
        "value": view.values,
        "text": view.texts,
        "flag": view.flags,
        "key": view.keys,
    }
    found: dict[int, dict[str, list]] = {}
    for kind, family in data.kind_rules.items():
        for item in sources[kind]:
            for entry in family.patterns.candidates(item[0] if kind == "path" else item):
                found.setdefault(family.rules[entry], {}).setdefault(kind, []).append(item)
    return found


def _match(
    rule: Rule, view: CallView, role: str, candidates: dict[str, list], data: GuardData
) -> RuleHit | None:
    """A rule fires when its conditions hold, every kind it requires matches (all of them
    with match = "all") and, of its other kinds, at least one does. `candidates`: per kind,
    the texts its pattern may match (no other can)."""
    if rule.categories is not None and rule.categories.isdisjoint(view.categories):
        return None
    if rule.roles is not None and role not in rule.roles:
        return None
    if rule.empty_filter and not view.empty_filter:
        return None
    if rule.unless_trusted and _all_trusted(view.hosts, data.trusted_domains):
        return None
    given = [kind for kind in RULE_KINDS if kind in rule.kinds]
    if not given:
        return _hit(rule, "filter selects every record") if rule.empty_filter else None
    matches: dict[str, str] = {}
    for kind in given:
        texts = candidates.get(kind)
        if texts and kind == "path":
            texts = [p for p, used in texts if _mode_fits(rule.mode, used)]
        reported = rule.unless_reported and kind == "text"
        matched = _first(rule.patterns[kind], texts, reported) if texts else None
        if matched is not None:
            matches[kind] = matched
    required = set(given) if rule.match_all else set(rule.requires)
    optional = [kind for kind in given if kind not in required]
    if not required <= matches.keys():
        return None
    if optional and not any(kind in matches for kind in optional):
        return None
    return _hit(rule, " / ".join(matches[kind] for kind in given if kind in matches))


def _all_trusted(hosts: list[str], domains: tuple[str, ...]) -> bool:
    return bool(hosts) and all(
        any(host == d or host.endswith("." + d) for d in domains) for host in hosts
    )


def _limit_hits(view: CallView, data: GuardData, role: str) -> list[RuleHit]:
    hits = []
    for rule in data.limit_rules:
        if rule.categories is not None and rule.categories.isdisjoint(view.categories):
            continue
        if rule.roles is not None and role not in rule.roles:
            continue
        matched = _limit(rule, view) or _recipients(rule, view)
        if matched:
            hits.append(_hit(rule, matched))
    return hits


def _hit(rule: Rule, matched: str) -> RuleHit:
    return RuleHit(
        rule_id=rule.id,
        threat=rule.threat,
        risk=rule.risk,
        matched=clip(matched, _MATCH_CHARS),
        reason=rule.reason,
    )


def _first(
    pattern: regex.Pattern, texts: Iterable[str], unless_reported: bool = False
) -> str | None:
    """The first text the pattern matches (or the match, in a long one); with
    `unless_reported`, a match its sentence tells of as a note's or a message's request is
    passed over."""
    # No timeout: one that ran out (a busy process, a first search compiling the pattern)
    # let the call through unchecked. Every pattern runs in time linear in its bounded text
    # (`analysis.linear`; a user's is refused at load when it could not).
    for text in texts:
        if unless_reported:
            found = next(
                (m for m in pattern.finditer(text) if not _reported(text, m.start())), None
            )
        else:
            found = pattern.search(text)
        if found:
            return text if len(text) <= _MATCH_CHARS else found.group(0)
    return None


def _reported(text: str, start: int) -> bool:
    return bool(_REPORTED_REQUEST.search(text[max(0, start - _REPORT_REACH) : start]))


def _path_forms(path: str, data: GuardData) -> list[str]:
    """The path as written (home spelled `~`); when it climbs with `..`, where it lands
    (`/tmp/../etc/shadow` is read by rules as `/etc/shadow` too); and when it is a glob, the
    secret files it would name (`/etc/shad?w`)."""
    written = _expand(path)
    forms = [written, _landing(written)]
    if is_glob(written):
        forms.extend(f for form in forms[:] for f in named_by_glob(form, data.secret_paths))
    return list(dict.fromkeys(forms))


def _landing(path: str) -> str:
    """Where a path that climbs (`/tmp/..`, `/tmp/../*`) lands; other paths as they are."""
    if path.endswith("/..") or "/../" in path:
        return posixpath.normpath(path)
    return path


def _mode_fits(rule_mode: str, used: str) -> bool:
    if rule_mode in ("any", used):
        return True
    deletes = ("delete", "delete_tree")
    return (rule_mode == "write" and used in ("write", *deletes)) or (
        rule_mode == "delete" and used in deletes
    )


def _expand(path: str) -> str:
    """`~/.ssh/id_rsa`, `$HOME/.ssh/id_rsa` and `/home/x/.ssh/../.ssh/id_rsa` read alike."""
    for home in ("$HOME", "${HOME}"):
        if path.startswith(home):
            path = "~" + path[len(home) :]
    if "/./" in path or path.endswith("/.") or "//" in path:
        path = posixpath.normpath(path)
    return path


def _limit(rule: Rule, view: CallView) -> str | None:
    if rule.limit is None:
        return None
    big = [n for n in view.limits if n >= rule.limit]
    return f"limit {max(big)}" if big else None


def _recipients(rule: Rule, view: CallView) -> str | None:
    if rule.recipients is None or view.recipients < rule.recipients:
        return None
    return f"{view.recipients} recipients"


def _tree_removals(view: CallView) -> Iterator[RuleHit]:
    """Recursive deletes of a root, a home, a system tree or a whole top-level folder."""
    bad = [p for p, mode in view.paths if mode == "delete_tree" and _destructive_target(p)]
    if any("--no-preserve-root" in c.args for c in view.commands):
        bad.append("/")
    if bad:
        yield RuleHit(
            rule_id="destroy.recursive_root",
            threat="resource_destruction",
            risk=95,
            matched=clip(", ".join(dict.fromkeys(bad)), _MATCH_CHARS),
            reason=f"recursively deletes {', '.join(dict.fromkeys(bad))}",
        )


def _destructive_target(path: str) -> bool:
    path = _landing(_expand(path.strip().strip("'\"")))
    if _ROOT_TARGETS.match(path.rstrip("/") or "/"):
        return True
    if path.startswith("~/"):
        first = path[2:].split("/", 1)[0]
        rest = path[2:].split("/", 1)[1] if "/" in path[2:] else ""
        return first not in _HOME_CACHES and rest in ("", "*")
    if path.startswith("/") and not _SCRATCH.match(path):
        parts = [p for p in path.strip("/").split("/") if p]
        return len(parts) <= 2 or parts[-1] == "*"
    return False


def _unread(view: CallView) -> Iterator[RuleHit]:
    """A call longer than the guard reads is not vouched for past that: padding would
    otherwise hide `rm -rf /` behind 64,000 harmless characters. Unread code, a command or
    SQL blocks; other unread text (a long file's content, a long message) warns."""
    for runs, rule_id, risk, part in (
        (True, "obfuscated.unread_code", _UNREAD_CODE_RISK, "part of what the call runs"),
        (False, "obfuscated.unread", _UNREAD_TEXT_RISK, "part of the call's arguments"),
    ):
        unread = [
            f"{what} ({size:,} more)" for what, size, running in view.unread if running == runs
        ]
        if unread:
            yield RuleHit(
                rule_id=rule_id,
                threat="obfuscated_payloads",
                risk=risk,
                matched=clip(", ".join(unread), _MATCH_CHARS),
                reason=f"{part} is past what the guard reads, so it is unchecked",
            )


def _unbounded_sql(statements: list[str]) -> Iterator[RuleHit]:
    for statement in statements:
        if _UNBOUNDED_SQL.match(statement):
            yield RuleHit(
                rule_id="destroy.sql_unbounded",
                threat="resource_destruction",
                risk=85,
                matched=clip(statement, _MATCH_CHARS),
                reason="changes or deletes every row (no WHERE clause)",
            )
