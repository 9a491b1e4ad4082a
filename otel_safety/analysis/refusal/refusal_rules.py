"""The refusal family's data, compiled: refusal corpus, harm markers, jailbreak patterns.

One refusal corpus (`data/refusal.toml`), one set of harm markers (`data/harm_markers.toml`)
and one set of jailbreak patterns (`data/jailbreak.toml`) serve over_refusal, under_refusal
and jailbreak_compliance alike. All three files are user-extensible through
`OTEL_SAFETY_DATA_DIR`; they are compiled once per data directory and cached, most patterns
into one `PatternIndex` so that a text is read once whatever the number of patterns.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import regex

from otel_safety.analysis import linear
from otel_safety.analysis.pattern_cache import compiled
from otel_safety.analysis.patterns.data_checks import is_number, is_weight, string_list
from otel_safety.analysis.patterns.data_patterns import checked_alternation, compile_pattern
from otel_safety.analysis.patterns.datafiles import current_data_dir, load_data, user_files
from otel_safety.analysis.patterns.pattern_index import PatternIndex
from otel_safety.analysis.refusal.harm_vocabulary import expand, vocabulary

__all__ = ["FLAGS", "Markers", "current_markers", "load_markers"]

FLAGS = regex.IGNORECASE


@dataclass(frozen=True)
class Markers:
    """The three data files, compiled into one pattern index plus a few plain patterns.

    Pattern groups in the index: `refusal.<list>`, `not_refusal`, `harm.<category>`,
    `attempt.<kind>`, `compliance.<list>` and `advice.<domain>` (the output side).
    """

    book: PatternIndex
    harm_weights: Mapping[str, float]  # heaviest first
    attempt_weights: Mapping[str, float]
    descriptive: regex.Pattern | None  # sentence openings that ask about events, not a how-to
    suffix_weight: float
    advice_rules: Mapping[str, regex.Pattern]  # domain -> system prompt rule that forbids it


_FILES = ("refusal", "harm_markers", "jailbreak")


@functools.cache
def load_markers(data_dir: str | None = None) -> Markers:
    """Compile the packaged files, extended by the same-named files in `data_dir`."""
    if any(user_files(name, data_dir) for name in _FILES):
        return _load_markers(data_dir)
    with linear.packaged_patterns():  # ours alone: compiled on first need
        return _load_markers(data_dir)


def _load_markers(data_dir: str | None) -> Markers:
    refusal = load_data("refusal", data_dir=data_dir)
    harm = load_data("harm_markers", data_dir=data_dir)
    jailbreak = load_data("jailbreak", data_dir=data_dir)
    vocab = vocabulary(harm.get("vocab", {}), harm.get("verbs", {}))
    groups: dict[str, list[str]] = {}
    for name, entries in refusal.get("refusal", {}).items():
        groups[f"refusal.{name}"] = _strings(entries, f"refusal.{name}")
    groups["not_refusal"] = [
        entry
        for name, entries in refusal.get("not_refusal", {}).items()
        for entry in _strings(entries, f"not_refusal.{name}")
    ]
    harm_weights = _weighted(harm.get("categories", {}), "harm", groups, vocab)
    attempt_weights = _weighted(jailbreak.get("attempt", {}), "attempt", groups, {})
    for name, entries in jailbreak.get("compliance", {}).items():
        groups[f"compliance.{name}"] = _strings(entries, f"compliance.{name}")
    advice_rules = {}
    for domain, spec in jailbreak.get("forbidden_advice", {}).items():
        rule = _union(_strings(spec.get("system", []), f"forbidden_advice.{domain}.system"))
        if rule is not None and spec.get("output"):
            advice_rules[domain] = rule
            groups[f"advice.{domain}"] = _strings(spec["output"], f"forbidden_advice.{domain}")
    context = harm.get("context", {})
    return Markers(
        book=_index(groups),
        harm_weights=harm_weights,
        attempt_weights=attempt_weights,
        descriptive=_union(_strings(context.get("descriptive", []), "context.descriptive")),
        suffix_weight=_weight(jailbreak.get("adversarial_suffix_weight", 0.6), "suffix", True),
        advice_rules=advice_rules,
    )


def current_markers() -> Markers:
    """The markers in force: packaged data plus the files in OTEL_SAFETY_DATA_DIR."""
    return load_markers(current_data_dir())


def _index(groups: Mapping[str, Sequence[str]]) -> PatternIndex:
    """Every group's patterns compiled (an error names the group) and indexed."""
    return PatternIndex.build(
        {
            group: [
                (source, compile_pattern(source, f"refusal markers {group}", FLAGS))
                for source in sources
            ]
            for group, sources in groups.items()
        }
    )


def _weighted(
    tables: Mapping[str, Any],
    prefix: str,
    groups: dict[str, list[str]],
    vocab: Mapping[str, list[str]],
) -> dict[str, float]:
    """Register each table's patterns as a group; return the weights, heaviest first."""
    weights = {}
    for name, spec in tables.items():
        where = f"{prefix}.{name}"
        if not isinstance(spec, Mapping):
            raise ValueError(f"refusal markers {where}: expected a table")
        patterns = [expand(p, vocab, where) for p in _strings(spec.get("patterns", []), where)]
        if patterns:
            groups[where] = patterns
            weights[name] = _weight(spec.get("weight", 1.0), where)
    return dict(sorted(weights.items(), key=lambda item: -item[1]))


def _strings(entries: Any, where: str) -> list[str]:
    return string_list(entries, f"refusal markers {where}")


def _union(entries: list[str]) -> regex.Pattern | None:
    """One alternation for a list of patterns (for short texts such as a system prompt)."""
    source = checked_alternation(entries, "refusal markers pattern", FLAGS)
    return compiled(source, FLAGS) if entries else None


def _weight(value: Any, where: str, allow_zero: bool = False) -> float:
    if not is_number(value):
        raise ValueError(f"refusal markers {where}: weight must be a number")
    if not ((allow_zero and value == 0) or is_weight(value)):
        raise ValueError(f"refusal markers {where}: weight must be in (0, 1]")
    return float(value)
