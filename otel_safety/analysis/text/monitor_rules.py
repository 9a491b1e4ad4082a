"""The monitors' data (`data/monitors.toml`) compiled once, and the small text maths they share.

Topic similarity is a bag of word stems compared by cosine: no model, no network, and a cost
linear in the text. Keyword and action risk are weighted pattern lists; legitimate context
(research, authorised testing, a task that names the topic) lowers keyword risk.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import regex

from otel_safety.analysis.memo import content_memo
from otel_safety.analysis.pattern_cache import compiled
from otel_safety.analysis.pattern_set import PatternSet
from otel_safety.analysis.patterns.datafiles import current_data_dir, load_compiled

__all__ = [
    "DriftSettings",
    "MonitorRules",
    "cosine",
    "current_rules",
    "load_rules",
    "terms",
]

FLAGS = regex.IGNORECASE
_WORD = compiled(r"[\p{L}\p{N}]+")
_LEVELS = {"severe": 1.0, "elevated": 0.5}


@dataclass(frozen=True)
class DriftSettings:
    base: float
    decay: float
    persistent_turn: float
    persistent_turns: int
    single_cap: float
    max_turns: int


@dataclass(frozen=True)
class Hit:
    """One risky word or action found, with its weight."""

    text: str
    weight: float


@dataclass(frozen=True)
class MonitorRules:
    weights: Mapping[str, float]  # malicious / keywords / action, summing to 1
    legitimate_factor: float
    keywords: tuple[tuple[regex.Pattern, float], ...]
    legitimate: tuple[regex.Pattern, ...]
    actions: tuple[tuple[regex.Pattern, float], ...]
    drift: DriftSettings
    stopwords: frozenset[str]
    denied: tuple[regex.Pattern, ...]
    anomalies: tuple[regex.Pattern, ...]
    repeated_denials: int
    outcome_weights: Mapping[str, float]  # score of each kind of tool outcome

    def keyword_hits(self, text: str) -> list[Hit]:
        return _hits(self.keywords, text)

    def keyword_risk(self, text: str, task: str = "") -> tuple[float, list[Hit], bool]:
        """Risk of the words in `text` in [0, 1], the words, and whether context excused them.

        Words the task names do not count; legitimate context scales the rest down.
        """
        named = {hit.text.lower() for hit in self.keyword_hits(task)} if task else set()
        hits = [hit for hit in self.keyword_hits(text) if hit.text.lower() not in named]
        legitimate = bool(hits) and any(p.search(text) or p.search(task) for p in self.legitimate)
        risk = min(1.0, sum(hit.weight for hit in hits))
        return (risk * self.legitimate_factor if legitimate else risk), hits, legitimate

    def action_risk(self, texts: Iterable[str]) -> tuple[float, list[Hit]]:
        """The riskiest action among the tool calls' names and arguments."""
        hits = [hit for text in texts for hit in _hits(self.actions, text)]
        return max((hit.weight for hit in hits), default=0.0), hits

    def matches(self, patterns: Iterable[regex.Pattern], text: str) -> list[str]:
        return [m.group(0) for p in patterns if (m := p.search(text))]

    def terms(self, text: str) -> Counter[str]:
        return terms(text, self.stopwords)


@content_memo
def terms(text: str, stopwords: frozenset[str] = frozenset()) -> Counter[str]:
    """Word stems of `text` without stop words: the vector topic similarity compares."""
    if text.isascii():  # lower-casing ASCII moves no word boundary: one call for all
        words = _WORD.findall(text.lower())
    else:
        words = [word.lower() for word in _WORD.findall(text)]
    return Counter(map(_stem, [w for w in words if len(w) > 1 and w not in stopwords]))


def cosine(a: Mapping[str, int], b: Mapping[str, int]) -> float:
    """Cosine similarity of two term-count vectors (0 when either is empty)."""
    if not a or not b:
        return 0.0
    small, large = (a, b) if len(a) <= len(b) else (b, a)
    dot = sum(count * large.get(term, 0) for term, count in small.items())
    norm = math.sqrt(sum(v * v for v in a.values())) * math.sqrt(sum(v * v for v in b.values()))
    return dot / norm if norm else 0.0


@functools.lru_cache(maxsize=65_536)
def _stem(word: str) -> str:
    """A crude suffix strip, enough for 'chemicals' ~ 'chemical' ~ 'chemistry' to meet."""
    for suffix in (
        "ations",
        "ation",
        "icals",
        "ical",
        "istry",
        "ings",
        "ing",
        "ies",
        "ied",
        "ed",
        "es",
        "s",
        "y",
    ):
        if word.endswith(suffix) and len(word) - len(suffix) >= 4:
            return word[: -len(suffix)]
    return word


def _hits(patterns: tuple[tuple[regex.Pattern, float], ...], text: str) -> list[Hit]:
    """The first match of each pattern, one hit per distinct word; only the patterns one
    pass of the list's pattern set reports are searched on their own."""
    found: dict[str, Hit] = {}
    if not text:
        return []
    shown = _pattern_set(patterns).candidates(text)
    for number, (pattern, weight) in enumerate(patterns):
        match = pattern.search(text) if number in shown else None
        if match and match.group(0).lower() not in found:
            found[match.group(0).lower()] = Hit(match.group(0), weight)
    return list(found.values())


@functools.lru_cache(maxsize=16)
def _pattern_set(patterns: tuple[tuple[regex.Pattern, float], ...]) -> PatternSet:
    return PatternSet([[pattern] for pattern, _ in patterns])


@functools.cache  # per data folder, as every detector's data
def load_rules(data_dir: str | None = None) -> MonitorRules:
    return load_compiled("monitors", _compile, "monitor rules", data_dir=data_dir)


def current_rules() -> MonitorRules:
    """The rules in force: packaged data plus `monitors.toml` in OTEL_SAFETY_DATA_DIR."""
    return load_rules(current_data_dir())


def _compile(data: Mapping[str, Any]) -> MonitorRules:
    intent = data.get("intent", {})
    weights = {k: float(intent.get("weights", {}).get(k, 0.0)) for k in _PARTS}
    total = sum(weights.values())
    if total <= 0 or any(w < 0 for w in weights.values()):
        raise ValueError(f"intent.weights must be non-negative and not all 0: {weights}")
    drift = data.get("drift", {})
    outcome = data.get("outcome", {})
    settings = DriftSettings(
        base=_fraction(drift.get("base", 0.3), "drift.base"),
        decay=_fraction(drift.get("decay", 0.5), "drift.decay"),
        persistent_turn=_fraction(drift.get("persistent_turn", 0.5), "drift.persistent_turn"),
        persistent_turns=max(1, int(drift.get("persistent_turns", 2))),
        single_cap=_fraction(drift.get("single_cap", 0.45), "drift.single_cap"),
        max_turns=max(2, int(drift.get("max_turns", 64))),
    )
    keywords = _levels(intent.get("keywords", {}), "intent.keywords")
    actions = _levels(intent.get("actions", {}), "intent.actions")
    _pattern_set(keywords), _pattern_set(actions)  # built at start-up, not on a trace
    return MonitorRules(
        weights={k: w / total for k, w in weights.items()},
        legitimate_factor=_fraction(intent.get("legitimate_factor", 0.4), "legitimate_factor"),
        keywords=keywords,
        legitimate=_patterns(intent.get("legitimate", {}).get("patterns", []), "legitimate"),
        actions=actions,
        drift=settings,
        stopwords=frozenset(str(w).lower() for w in drift.get("stopwords", [])),
        denied=_patterns(outcome.get("denied", []), "outcome.denied"),
        anomalies=_patterns(outcome.get("anomalies", []), "outcome.anomalies"),
        repeated_denials=max(1, int(outcome.get("repeated_denials", 2))),
        outcome_weights=_outcome_weights(outcome.get("weights", {})),
    )


OUTCOME_KINDS = (
    "errored",
    "blocked",
    "anomaly",
    "risky_action",
    "high_risk_completion",
    "unauthorized_access",
)


def _outcome_weights(table: Any) -> dict[str, float]:
    if not isinstance(table, Mapping):
        raise ValueError("outcome.weights must be a table of outcome kind = score")
    unknown = sorted(set(table) - set(OUTCOME_KINDS))
    missing = [kind for kind in OUTCOME_KINDS if kind not in table]
    if unknown or missing:
        raise ValueError(
            f"outcome.weights: unknown kind(s) {', '.join(unknown) or 'none'}, missing "
            f"{', '.join(missing) or 'none'}; the kinds are {', '.join(OUTCOME_KINDS)}"
        )
    return {kind: _fraction(table[kind], f"outcome.weights.{kind}") for kind in OUTCOME_KINDS}


_PARTS = ("malicious", "keywords", "action")


def _levels(groups: Mapping[str, Any], where: str) -> tuple[tuple[regex.Pattern, float], ...]:
    unknown = sorted(set(groups) - set(_LEVELS))
    if unknown:
        raise ValueError(f"{where}: unknown level(s) {', '.join(unknown)}; use severe, elevated")
    return tuple(
        (pattern, _LEVELS[level])
        for level, entries in groups.items()
        for pattern in _patterns(entries, f"{where}.{level}")
    )


def _patterns(entries: Any, where: str) -> tuple[regex.Pattern, ...]:
    if not isinstance(entries, list) or not all(isinstance(e, str) for e in entries):
        raise ValueError(f"{where} must be a list of strings")
    found = []
    for entry in entries:
        try:
            found.append(compiled(entry, FLAGS))
        except regex.error as exc:
            raise ValueError(f"{where}: bad pattern {entry!r}: {exc}") from exc
    return tuple(found)


def _fraction(value: Any, where: str) -> float:
    if not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
        raise ValueError(f"{where} must be a number in [0, 1], got {value!r}")
    return float(value)
