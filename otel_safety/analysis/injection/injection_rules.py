"""The injection rules: `data/injection.toml` (plus a user's file), checked and compiled.

A rule is a pattern, what a match of it is evidence of and how much, where it applies
(anywhere, or only in data the agent fetched), and optional hints and leads that let the
prefilter skip texts and places the rule cannot match. See the data file for the fields.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import regex

from otel_safety.analysis.pattern_cache import compiled
from otel_safety.analysis.pattern_set import PatternSet
from otel_safety.analysis.patterns.data_checks import check_keys, is_string_list, is_weight
from otel_safety.analysis.patterns.data_patterns import alternation, compile_pattern
from otel_safety.analysis.patterns.datafiles import current_data_dir, load_compiled

__all__ = [
    "DEFAULT_REACH",
    "InjectionRule",
    "InjectionRules",
    "current_rules",
    "load_rules",
]

DEFAULT_REACH = 160
FLAGS = regex.MULTILINE | regex.VERSION1
_SCOPES = ("any", "data")
_RULE_KEYS = frozenset(
    {
        "id",
        "category",
        "weight",
        "scope",
        "pattern",
        "case_sensitive",
        "raw",
        "hints",
        "leads",
        "reach",
        "examples",
    }
)
# What a hint must be: one word as the prefilter splits a text into words.
_WORD = compiled(r"\w+")


@dataclass(frozen=True)
class InjectionRule:
    """One compiled pattern and what a match of it is evidence of."""

    id: str
    category: str
    weight: float
    scope: str
    raw: bool
    pattern: regex.Pattern
    hints: frozenset[str] = frozenset()
    leads: tuple[str, ...] = ()
    reach: int = DEFAULT_REACH
    examples: tuple[str, ...] = ()


@dataclass(frozen=True)
class InjectionRules:
    """The compiled rule set: rules plus how to recognise a mere mention."""

    version: int
    rules: tuple[InjectionRule, ...]
    mention_factor: float
    mention_cues: regex.Pattern | None
    # Cues that introduce an example ("e.g.", "such as"): counted only before a match.
    example_cues: regex.Pattern | None = None
    # One linear-time pass over a text tells which text rules (not `raw` ones) can match
    # any part of it; the others are not tried (see analysis.pattern_set).
    rule_set: PatternSet = field(init=False)
    # The raw rules' numbers: tried on every text beyond ASCII, whatever the set reports.
    raw_numbers: frozenset[int] = field(init=False)

    def __post_init__(self) -> None:
        entries = [[] if r.raw else [r.pattern] for r in self.rules]
        object.__setattr__(self, "rule_set", PatternSet(entries, whole_text=False))
        raw = frozenset(number for number, rule in enumerate(self.rules) if rule.raw)
        object.__setattr__(self, "raw_numbers", raw)


@functools.cache
def load_rules(data_dir: str | None = None) -> InjectionRules:
    """The packaged rules, extended by `<data_dir>/injection.toml` when there is one."""
    return load_compiled("injection", _compile, "injection rules", data_dir)


def current_rules() -> InjectionRules:
    """The rules in force for the current `OTEL_SAFETY_DATA_DIR`."""
    return load_rules(current_data_dir())


def _compile(data: Mapping[str, Any]) -> InjectionRules:
    rules: list[InjectionRule] = []
    seen: set[str] = set()
    for index, spec in enumerate(data.get("rules", [])):
        rule = _compile_rule(spec, f"rules[{index}]")
        if rule.id in seen:
            raise ValueError(f"rule id {rule.id!r} is defined twice")
        seen.add(rule.id)
        rules.append(rule)
    factor = data.get("mention_factor", 0.25)
    if not isinstance(factor, int | float) or not 0.0 <= factor <= 1.0:
        raise ValueError(f"mention_factor must be a number in [0, 1], not {factor!r}")
    return InjectionRules(
        version=int(data.get("version", 1)),
        rules=tuple(rules),
        mention_factor=float(factor),
        mention_cues=_cues(data, "mention_cues"),
        example_cues=_cues(data, "example_cues"),
    )


def _cues(data: Mapping[str, Any], key: str) -> regex.Pattern | None:
    cues = [str(cue) for cue in data.get(key, [])]
    return _pattern(alternation(cues), key) if cues else None


def _compile_rule(spec: Any, where: str) -> InjectionRule:
    if not isinstance(spec, Mapping):
        raise ValueError(f"{where}: a rule is a table, not {type(spec).__name__}")
    check_keys(spec, _RULE_KEYS, where)
    for key in ("id", "category", "pattern"):
        if not isinstance(spec.get(key), str) or not spec[key]:
            raise ValueError(f"{where}: `{key}` must be a non-empty string")
    where = f"{where} ({spec['id']})"
    weight = spec.get("weight")
    if not is_weight(weight):
        raise ValueError(f"{where}: weight must be a number in (0, 1], not {weight!r}")
    scope = spec.get("scope", "any")
    if scope not in _SCOPES:
        raise ValueError(f"{where}: scope must be one of {', '.join(_SCOPES)}, not {scope!r}")
    hints, leads, examples = spec.get("hints", []), spec.get("leads", []), spec.get("examples", [])
    for key, value in (("hints", hints), ("leads", leads), ("examples", examples)):
        if not is_string_list(value):
            raise ValueError(f"{where}: {key} must be a list of non-empty strings")
    if any(not _WORD.fullmatch(hint.lower()) for hint in hints):
        raise ValueError(f"{where}: hints must be single words (letters, digits, underscore)")
    if (hints or leads) and spec.get("raw"):
        raise ValueError(f"{where}: a raw rule cannot have hints or leads")
    reach = spec.get("reach", DEFAULT_REACH)
    if isinstance(reach, bool) or not isinstance(reach, int) or reach < 0:
        raise ValueError(f"{where}: reach must be a whole number of characters, not {reach!r}")
    return InjectionRule(
        id=spec["id"],
        category=spec["category"],
        weight=float(weight),
        scope=scope,
        raw=bool(spec.get("raw", False)),
        pattern=_pattern(spec["pattern"], where, bool(spec.get("case_sensitive", False))),
        hints=frozenset(hint.lower() for hint in hints),
        leads=tuple(dict.fromkeys(lead.lower() for lead in leads)),
        reach=reach,
        examples=tuple(examples),
    )


def _pattern(source: str, where: str, case_sensitive: bool = False) -> regex.Pattern:
    flags = FLAGS if case_sensitive else FLAGS | regex.IGNORECASE
    return compile_pattern(source, where, flags, quote_source=False)
