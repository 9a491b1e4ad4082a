"""The guard's data file (`guard.toml`) compiled once: categories, trust levels and rules."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import regex
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from otel_safety.analysis import linear, pattern_cache
from otel_safety.analysis.calls.grants import PhraseSet
from otel_safety.analysis.calls.tool_names import name_pattern
from otel_safety.analysis.pattern_set import PatternSet
from otel_safety.analysis.patterns.data_patterns import check_user_fragments, compile_pattern
from otel_safety.analysis.patterns.datafiles import UserText, current_data_dir, load_compiled

Pattern = regex.Pattern

RULE_KINDS = (
    "command",
    "pipe",
    "script",
    "sql",
    "path",
    "url",
    "text",
    "value",
    "tool",
    "flag",
    "key",
)
PATH_MODES = ("read", "write", "delete", "delete_tree", "any")
ROLES = ("owner", "agent", "non_owner", "unknown", "anonymous")


@dataclass(frozen=True)
class Rule:
    """A dangerous pattern: stable id, the threat it stands for and how risky it is."""

    id: str
    threat: str
    risk: int
    reason: str
    patterns: Mapping[str, Pattern | None]  # one alternation per kind
    mode: str = "any"
    categories: frozenset[str] | None = None
    roles: frozenset[str] | None = None
    limit: int | None = None
    recipients: int | None = None
    match_all: bool = False
    requires: frozenset[str] = frozenset()  # kinds that must match besides any other one
    empty_filter: bool = False  # only calls whose filter selects every record
    unless_trusted: bool = False  # not when every destination is a trusted domain
    # Not a text match that a sentence tells of as someone else's request ("the host's upload
    # had a note asking to disable conflict checks"): the call reports it.
    unless_reported: bool = False
    # Task phrases (the scope taxonomy's grant grammar) that ask for this very danger
    # ("delete all emails in my spam folder"): then the rule only warns.
    asked_by: PhraseSet | None = None
    # What else the task must name for it to ask for this very call: "values" (the call's
    # short argument values), "sql" (the tables its statements name) or "command" (a
    # resource the matched command names); "" for nothing.
    asked_target: str = ""

    @functools.cached_property
    def kinds(self) -> frozenset[str]:
        """The pattern kinds this rule has."""
        return frozenset(kind for kind, pattern in self.patterns.items() if pattern is not None)


class GuardLimits(BaseModel):
    """The `[limits]` table: loop and rate limits and how an unverified principal's high-risk
    request is treated. Constructor arguments of `Guard` and `ToolGuardDetector` override it."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    repeat_limit: int = Field(5, ge=1)
    rate_limit: int = Field(10, ge=1)
    rate_window: float = Field(10.0, gt=0)
    block_high_risk_unverified: bool = True

    def updated(self, **given: Any) -> GuardLimits:
        """These limits with the given non-None values replacing them, checked."""
        values = {k: v for k, v in given.items() if v is not None}
        return limits_from({**self.model_dump(), **values}, "guard setting")


def limits_from(values: Mapping[str, Any], where: str) -> GuardLimits:
    """`GuardLimits` from a table or arguments, as a ValueError naming each bad value."""
    try:
        return GuardLimits.model_validate(dict(values))
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc']))}: {e['msg']}, got {e['input']!r}" for e in exc.errors()
        )
        raise ValueError(f"{where}: {problems}") from None


@dataclass(frozen=True)
class GuardData:
    block_at: int
    warn_at: int
    extra_threat: int
    trust: Mapping[str, int]
    side_effects: frozenset[str]
    tools: Mapping[str, tuple[Pattern, ...]]
    arguments: Mapping[str, frozenset[str]]
    commands: Mapping[str, tuple[Pattern, ...]]
    rules: tuple[Rule, ...]
    database_products: tuple[Pattern, ...]  # a tool named after a database reads or writes it
    database_writes: tuple[Pattern, ...]
    trusted_domains: tuple[str, ...]
    secret_paths: tuple[str, ...]  # what a glob is matched against (`guard.globs`)
    kind_rules: Mapping[str, KindRules]  # per kind that some rule has: its patterns as one set
    limits: GuardLimits = field(default_factory=GuardLimits)
    name_memo: dict[str, tuple[str, ...]] = field(default_factory=dict, compare=False)

    def needed_trust(self, category: str) -> int:
        return self.trust.get(category, self.trust.get("other", 2))

    @functools.cached_property
    def asked(self) -> Mapping[str, Rule]:
        """The rules a task can ask for (see `Rule.asked_by`), by id."""
        return {rule.id: rule for rule in self.rules if rule.asked_by is not None}

    @functools.cached_property
    def kindless(self) -> frozenset[int]:
        """The numbers of the rules without a pattern (a filter or a limit alone): every
        call meets them, where a rule with patterns is met only when its set reports it."""
        return frozenset(number for number, rule in enumerate(self.rules) if not rule.kinds)

    @functools.cached_property
    def limit_rules(self) -> tuple[Rule, ...]:
        """The rules with a limit or a recipient count, in file order."""
        return tuple(r for r in self.rules if r.limit is not None or r.recipients is not None)


@functools.lru_cache(maxsize=8)
def load_guard_data(data_dir: str | None = None) -> GuardData:
    return load_compiled("guard", _compile, "guard", data_dir=data_dir)


def current_guard_data() -> GuardData:
    """Packaged data merged with `$OTEL_SAFETY_DATA_DIR/guard.toml`, compiled once per dir."""
    return load_guard_data(current_data_dir())


def _named(
    source: str, where: str, flags: int = 0, compile: Callable[..., Any] | None = None
) -> Any:
    """`source` compiled (by `regex.compile` unless told), looked up at each call; a bad
    one is a ValueError naming its table and the pattern."""
    try:
        return (compile or pattern_cache.compiled)(source, flags)
    except regex.error as exc:
        raise ValueError(f"{where}: bad pattern {source!r}: {exc}") from None


def _command(source: str, where: str) -> Any:
    """A command pattern; a user's checked to run in linear time, or refused naming it."""
    if isinstance(source, UserText):
        return compile_pattern(source, where, regex.IGNORECASE)
    return _named(source, where, regex.IGNORECASE, linear.compile)


def _name(entry: str, where: str) -> Any:
    """A tool name word as a name pattern; a user's entry checked as a pattern of its own."""
    check_user_fragments([entry], where)
    user = isinstance(entry, UserText)  # a user's word runs on RE2 when it can, as a rule's
    return _named(name_pattern(entry), where, compile=linear.compile if user else None)


# The ids of the checks the guard's code makes itself (not rules from data files).
CODE_RULE_IDS = frozenset(
    {
        "deep.analysis",
        "destroy.recursive_root",
        "destroy.sql_unbounded",
        "exfil.secret_flow",
        "halt.conversation",
        "identity.spoofed_name",
        "identity.unverified_high_risk",
        "loop.rate",
        "loop.repeat",
        "obfuscated.unread",
        "obfuscated.unread_code",
        "scope.beyond_task",
        "trust.category_not_allowed",
        "trust.instructed_by_content",
        "trust.insufficient",
    }
)


def _compile(data: Mapping[str, Any]) -> GuardData:
    for table in ("tools", "arguments", "commands"):
        for key in data[table]:
            _check_list(data[table], key, f"[{table}]")
    _check_list(data["network"], "trusted_domains", "[network]")
    _check_list(data["globs"], "secret_paths", "[globs]")
    _check_list(data["trust"], "side_effects", "[trust]")
    _check_list(data["database_tools"], "products", "[database_tools]")
    _check_list(data["database_tools"], "writes", "[database_tools]")
    trust = dict(data["trust"])
    side_effects = frozenset(trust.pop("side_effects", []))
    for category, level in trust.items():
        if not isinstance(level, int) or not 0 <= level <= 4:
            raise ValueError(f"[trust] {category} must be an integer 0-4, got {level!r}")
    tools = {
        category: tuple(_name(entry, f"[tools] {category}") for entry in entries)
        for category, entries in data["tools"].items()
    }
    unknown = sorted(set(tools) - set(trust))
    if unknown:
        raise ValueError(f"[tools] categories without a [trust] level: {', '.join(unknown)}")
    if not isinstance(data["rules"], Mapping):  # `[[rules]]`, as other detectors' files write
        raise ValueError(
            "the guard's rules are [[rules.list]] tables, not [[rules]]: write each rule "
            "under [[rules.list]]"
        )
    rules = tuple(_rule(spec) for spec in data["rules"]["list"])
    _known_categories(rules, side_effects, trust)
    ids = [rule.id for rule in rules]
    duplicated = sorted({i for i in ids if ids.count(i) > 1})
    if duplicated:
        raise ValueError(f"rule ids used twice: {', '.join(duplicated)}")
    taken = sorted(CODE_RULE_IDS.intersection(ids))
    if taken:  # its hits would read as the built-in check's, in audits and in exceptions
        raise ValueError(
            f"rule ids of the guard's own checks cannot name a [[rules.list]] rule: "
            f"{', '.join(taken)}; give the rule an id of its own"
        )
    block, warn, extra = _decisions(data["decisions"])
    return GuardData(
        block_at=block,
        warn_at=warn,
        extra_threat=extra,
        trust=trust,
        side_effects=side_effects,
        tools=tools,
        arguments={key: frozenset(values) for key, values in data["arguments"].items()},
        commands={
            category: tuple(_command(p, f"[commands] {category}") for p in patterns)
            for category, patterns in data["commands"].items()
        },
        rules=rules,
        trusted_domains=tuple(d.lower().lstrip("*.") for d in data["network"]["trusted_domains"]),
        secret_paths=tuple(data["globs"]["secret_paths"]),
        database_products=tuple(
            _name(e, "[database_tools] products") for e in data["database_tools"]["products"]
        ),
        database_writes=tuple(
            _name(e, "[database_tools] writes") for e in data["database_tools"]["writes"]
        ),
        kind_rules={kind: family for kind in RULE_KINDS if (family := _kind_rules(rules, kind))},
        limits=limits_from(data.get("limits", {}), "[limits]"),
    )


@dataclass(frozen=True)
class KindRules:
    """One kind's rule patterns as one RE2 set (see analysis.pattern_set): a single pass
    over a text names the few rules that may match it, and only their own patterns then
    run, so a call costs one pass per text rather than one search per rule."""

    rules: tuple[int, ...]  # per entry of the set, the rule's index in `GuardData.rules`
    patterns: PatternSet


def _kind_rules(rules: tuple[Rule, ...], kind: str) -> KindRules | None:
    """None when no rule has patterns of this kind."""
    numbers = tuple(n for n, rule in enumerate(rules) if rule.patterns[kind] is not None)
    if not numbers:
        return None
    return KindRules(numbers, PatternSet([[rules[n].patterns[kind]] for n in numbers]))


def scoped(pattern: str, ignore_case: bool) -> str:
    """A pattern that keeps its own case flag inside a larger alternation."""
    return f"(?{'i' if ignore_case else '-i'}:{pattern})"


def _rule(spec: Mapping[str, Any]) -> Rule:
    where = f"rule {spec.get('id', '?')!r}"
    known = {
        "match",
        "requires",
        "empty_filter",
        "unless_trusted",
        "unless_reported",
        *RULE_KINDS,
        "id",
        "threat",
        "risk",
        "reason",
        "mode",
        "categories",
        "roles",
        "case",
        "limit",
        "recipients",
        "asked_by",
        "asked_target",
    }
    stray = sorted(set(spec) - known)
    if stray:
        raise ValueError(f"{where}: unknown field(s) {', '.join(stray)}")
    for required in ("id", "threat", "risk", "reason"):
        if required not in spec:
            raise ValueError(f"{where}: needs `{required}`")
    risk = spec["risk"]
    if not isinstance(risk, int) or isinstance(risk, bool) or not 0 <= risk <= 100:
        raise ValueError(f"{where}: risk must be a whole number 0-100, got {risk!r}")
    for bound in ("limit", "recipients"):
        value = spec.get(bound)
        if value is not None and (type(value) is not int or value < 0):
            raise ValueError(f"{where}: {bound} must be a whole number >= 0, got {value!r}")
    mode = spec.get("mode", "any")
    if mode not in PATH_MODES:
        raise ValueError(f"{where}: mode must be one of {', '.join(PATH_MODES)}")
    roles = spec.get("roles")
    if roles is not None and not set(roles) <= set(ROLES):
        raise ValueError(f"{where}: roles must be among {', '.join(ROLES)}")
    for field_name in (*RULE_KINDS, "categories", "roles"):
        _check_list(spec, field_name, where)
    patterns: dict[str, Pattern | None] = {}
    for kind in RULE_KINDS:
        flags = 0 if spec.get("case") or kind in ("tool", "flag", "key") else regex.IGNORECASE
        check_user_fragments(spec.get(kind, []), f"{where} {kind}", flags)
        entries = (
            [name_pattern(e) for e in spec.get(kind, [])]
            if kind in ("tool", "flag", "key")
            else [scoped(e, ignore_case=not spec.get("case")) for e in spec.get(kind, [])]
        )
        try:
            patterns[kind] = linear.compile("|".join(entries)) if entries else None
        except regex.error as exc:
            raise ValueError(f"{where}: bad {kind} pattern: {exc}") from None
    conditions = ("limit", "recipients", "empty_filter")
    if not any(patterns.values()) and not any(spec.get(c) for c in conditions):
        raise ValueError(f"{where}: needs at least one pattern, `limit` or `recipients`")
    return Rule(
        id=str(spec["id"]),
        threat=str(spec["threat"]),
        risk=int(spec["risk"]),
        reason=str(spec["reason"]),
        patterns=patterns,
        mode=mode,
        categories=frozenset(spec["categories"]) if "categories" in spec else None,
        roles=frozenset(roles) if roles is not None else None,
        limit=spec.get("limit"),
        recipients=spec.get("recipients"),
        match_all=_match_mode(spec.get("match", "any"), where),
        requires=_required_kinds(spec.get("requires", []), patterns, where),
        empty_filter=bool(spec.get("empty_filter", False)),
        unless_trusted=bool(spec.get("unless_trusted", False)),
        unless_reported=bool(spec.get("unless_reported", False)),
        asked_by=_phrases(spec.get("asked_by"), where),
        asked_target=_asked_target(spec, where),
    )


def _known_categories(
    rules: tuple[Rule, ...], side_effects: frozenset[str], trust: Mapping[str, int]
) -> None:
    """A category named by a rule or as a side effect must be one the guard knows (has a
    [trust] level): a misspelt one ("paymnt") made its rule never fire, unsaid."""
    for where, named in [
        *((f"rule {rule.id!r}: categories", rule.categories or ()) for rule in rules),
        ("[trust] side_effects", side_effects),
    ]:
        unknown = sorted(set(named) - set(trust))
        if unknown:
            raise ValueError(
                f"{where}: unknown categor{'y' if len(unknown) == 1 else 'ies'} "
                f"{', '.join(unknown)}; the categories are those of [trust]"
            )


def _check_list(spec: Mapping[str, Any], name: str, where: str) -> None:
    """A list of strings, as TOML writes one: a bare string would be read one character at a
    time (`command = 'shred'` became five one-letter patterns that matched nearly any call)."""
    value = spec.get(name)
    if value is None:
        return
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        shown = repr(value) if len(repr(value)) <= 80 else repr(value)[:79] + "…"
        raise ValueError(
            f"{where}: `{name}` must be a list of strings, e.g. {name} = [{shown}], got {shown}"
        )


def _decisions(decisions: Mapping[str, Any]) -> tuple[int, int, int]:
    """The block and warn lines and the extra threat's weight, checked: a block line above
    100 blocks nothing, a warn line at 0 or below warns of every call."""
    try:
        block, warn, extra = (int(decisions[k]) for k in ("block", "warn", "extra_threat"))
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(
            f"[decisions] needs whole numbers block, warn, extra_threat: {exc}"
        ) from None
    if not 0 < warn < block <= 100:
        raise ValueError(
            f"[decisions] needs 0 < warn < block <= 100 (risks run 0-100), got warn = {warn}, "
            f"block = {block}"
        )
    if not 0 <= extra <= 100:
        raise ValueError(f"[decisions] extra_threat must be 0-100, got {extra}")
    return block, warn, extra


ASKED_TARGETS = ("values", "sql", "command", "wrapped")


def _asked_target(spec: Mapping[str, Any], where: str) -> str:
    target = spec.get("asked_target", "")
    if target and target not in ASKED_TARGETS:
        raise ValueError(f"{where}: asked_target must be one of {', '.join(ASKED_TARGETS)}")
    if target and "asked_by" not in spec:
        raise ValueError(f"{where}: asked_target needs asked_by phrases")
    return str(target)


def _phrases(value: Any, where: str) -> PhraseSet | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise ValueError(f"{where}: asked_by must be a list of task phrases")
    try:
        return PhraseSet.of(value)
    except regex.error as exc:
        raise ValueError(f"{where}: bad asked_by phrase: {exc}") from None


def _required_kinds(
    kinds: list[str], patterns: Mapping[str, Pattern | None], where: str
) -> frozenset[str]:
    missing = [k for k in kinds if patterns.get(k) is None]
    if missing:
        raise ValueError(f"{where}: requires {', '.join(missing)} but has no such patterns")
    return frozenset(kinds)


def _match_mode(value: str, where: str) -> bool:
    if value not in ("any", "all"):
        raise ValueError(f"{where}: match must be 'any' or 'all'")
    return value == "all"
