"""Rhetoric an answer should not use: fallacious arguments and pressure on the reader.

Each family (ad hominem, false dilemma, false urgency, "don't tell anyone" ...) is a list of
phrasings with one weight, kept in `data/agent_deception.toml`. A family counts once however
often it matches; families found together combine as 1 - prod(1 - weight), so one weak
phrasing stays below the alert threshold and an answer stacking several reaches it.

Limits: phrasings, not understanding. An answer that explains what a straw man is, or quotes
a scam message to warn about it, uses the same words; quoted passages and code blocks are
left out to soften that, and weights are kept low so one hit never fires alone.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import regex

from otel_safety.analysis.memo import content_memo
from otel_safety.analysis.pattern_cache import compiled
from otel_safety.analysis.pattern_set import PatternSet
from otel_safety.analysis.patterns.data_checks import check_keys, check_weight, string_list
from otel_safety.analysis.patterns.data_patterns import (
    any_of,
    checked_alternation,
    compile_pattern,
    compile_patterns,
)

__all__ = [
    "Family",
    "RhetoricHit",
    "combined",
    "compile_families",
    "lexicon_pattern",
    "rhetoric_hits",
    "word_set",
]

FLAGS = regex.IGNORECASE
_QUOTED = compiled(
    # A quote line's own indent only ([^\S\n]*): \s* ran over blank lines from every line start.
    r"```.*?(?:```|\Z)|\"[^\"\n]{12,400}\"|\u201c[^\u201d\n]{12,400}\u201d|^[^\S\n]*>.*$",
    regex.DOTALL | regex.MULTILINE,
)


@dataclass(frozen=True)
class Family:
    """One named pattern family: its weight and phrasings."""

    name: str
    weight: float
    patterns: tuple[regex.Pattern, ...]


@dataclass(frozen=True)
class RhetoricHit:
    """A family found in an answer, with the words that matched."""

    family: str
    weight: float
    text: str


def compile_families(table: Mapping[str, Any], where: str) -> tuple[Family, ...]:
    """`[fallacies.*]` or `[manipulation.*]` tables, checked: a weight and patterns each."""
    if not isinstance(table, Mapping):
        raise ValueError(f"{where} must be a table of families")
    families = []
    for name, spec in table.items():
        at = f"{where}.{name}"
        if not isinstance(spec, Mapping):
            raise ValueError(f"{at} must be a table with weight and patterns")
        check_keys(spec, {"weight", "patterns"}, at)
        weight = check_weight(spec.get("weight"), at)
        patterns = compile_patterns(string_list(spec.get("patterns", []), at), at, FLAGS)
        families.append(Family(name, weight, patterns))
    built = tuple(families)
    _pattern_set(built)  # built at start-up, not on the first trace
    return built


def rhetoric_hits(text: str, families: tuple[Family, ...]) -> list[RhetoricHit]:
    """One hit per family found in `text`, quoted passages and code left out. Only the
    phrasings one pass of the families' pattern set reports are searched on their own."""
    plain = _unquoted(text)
    shown = _pattern_set(families).candidates(plain)
    hits, first = [], 0
    for family in families:
        for number, pattern in enumerate(family.patterns, first):
            if number in shown and (match := pattern.search(plain)):
                hits.append(RhetoricHit(family.name, family.weight, match.group(0)))
                break
        first += len(family.patterns)
    return hits


@content_memo  # the fallacy and the manipulation families read the same answer
def _unquoted(text: str) -> str:
    return _QUOTED.sub(" ", text)


@functools.lru_cache(maxsize=16)
def _pattern_set(families: tuple[Family, ...]) -> PatternSet:
    """Every phrasing of `families`, one entry each, in order."""
    return PatternSet([[pattern] for family in families for pattern in family.patterns])


def combined(weights: list[float]) -> float:
    """Independent signals combined: 1 - prod(1 - w), 0 when there are none."""
    rest = 1.0
    for weight in weights:
        rest *= 1.0 - min(1.0, max(0.0, weight))
    return 1.0 - rest


def lexicon_pattern(
    table: Mapping[str, Any], key: str, where: str, *, whole: bool = False
) -> regex.Pattern:
    """A data list of patterns as one case-insensitive pattern; each entry is checked on
    its own first, so an error names it. `whole`: the pattern must match to the end."""
    at = f"{where}.{key}"
    entries = string_list(table.get(key, []), at)
    checked_alternation(entries, at, FLAGS)
    source = rf"(?:{any_of(entries)})\Z" if whole else any_of(entries)
    return compile_pattern(source, at, FLAGS, quote_source=False)


def word_set(table: Mapping[str, Any], key: str, where: str) -> frozenset[str]:
    """A data list of words, lower-cased."""
    return frozenset(w.lower() for w in string_list(table.get(key, []), f"{where}.{key}"))
