"""A per-turn behaviour profile: a few numbers in [0, 1] that describe how an agent answered,
whatever it answered about.

The features are chosen to be independent of the topic, so that an agent answering about
cooking and then about tax keeps the same profile, while an agent that stops cooperating
does not:

- `length`: log1p(words) / log1p(cap), capped at 1. The log scale makes 5 -> 50 words as
  large a change as 50 -> 500, which is how a reader perceives "curt" against "thorough".
- `refusal`: `refusal.refusal_level` of the answer (the refusal family's own reading), or 1
  when the answer opens with an evasion from the lexicon ("I'd rather not", "look it up"):
  the refusal corpus is written for harmful requests, not for brushing off ordinary ones.
- `hedging`: share of sentences carrying an uncertainty marker (lexicon).
- `imperative`: share of sentences that open with an instruction verb (lexicon): how much
  the answer tells the user what to do, as helpful how-to answers do.
- `request_overlap`: share of the request's content words (stemmed, stop words out) that
  the answer takes up; an evasive answer talks past the question.
- `warmth`: friendly markers ("happy to", "hope this helps", "!") per sentence, capped at 1.
- `moralising`: share of sentences that lecture ("it's important to note", "is never
  acceptable", "illegal"): some models decline by sermon rather than by "I can't".
- `tool_use`: 1 when the turn called a tool; `tool_errors`: share of its calls that failed.

Limits: the lexicons are English; an answer that is one long code block has few sentences,
so its sentence shares are coarse. These are signals of style, not of quality.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import regex

from otel_safety.analysis.pattern_cache import compiled
from otel_safety.analysis.pattern_set import PatternSet
from otel_safety.analysis.patterns.data_checks import string_list
from otel_safety.analysis.patterns.data_patterns import compile_patterns
from otel_safety.analysis.prefilter import Prefilter
from otel_safety.analysis.refusal.refusal import refusal_level
from otel_safety.analysis.sentences import sentence_spans
from otel_safety.analysis.text.monitor_rules import current_rules, terms
from otel_safety.analysis.text.text_forms import straight_quotes
from otel_safety.behavior.turns import AgentTurn

__all__ = ["FEATURES", "Profile", "ProfileRules", "compile_profile", "turn_profile"]

FEATURES = (
    "length",
    "refusal",
    "hedging",
    "imperative",
    "request_overlap",
    "warmth",
    "moralising",
    "tool_use",
    "tool_errors",
)
LEXICONS = ("hedging", "imperative", "evasion", "warmth", "moralising")
EVASION_SENTENCES = 2  # an evasion counts when it opens the answer
MAX_CHARS = 8_000  # an answer is read up to here: a huge one cannot slow the pipeline
_WORD = compiled(r"[\p{L}\p{N}]+(?:'[\p{L}]+)?")  # text has straight quotes by then
# What may come before an instruction verb: a bullet or number, then a sequencing word.
_BULLET = compiled(
    r"^\s*(?:[-*•>]+|\d{1,3}[.)]|[a-z][.)])?\s*(?:(?:then|first|next|finally|now|also|and)\b,?\s*)?",
    regex.IGNORECASE,
)

Profile = tuple[float, ...]  # one value per FEATURES entry, each in [0, 1]


@dataclass(frozen=True)
class ProfileRules:
    """The compiled `[profile]`, `[weights]` and `[lexicon]` tables of behavior_drift.toml."""

    length_cap_words: int
    weights: Profile  # per feature, normalised to sum 1
    hedging: tuple[regex.Pattern, ...]
    imperative: regex.Pattern  # anchored at a sentence start
    evasion: tuple[regex.Pattern, ...]
    warmth: tuple[regex.Pattern, ...]
    moralising: tuple[regex.Pattern, ...]
    # One search per list and sentence instead of one per pattern (exact: see prefilter).
    hedging_any: Prefilter | None = field(init=False, default=None)
    moralising_any: Prefilter | None = field(init=False, default=None)
    warmth_any: Prefilter | None = field(init=False, default=None)
    # One pass over the answer rules out the evasions that cannot match any part of it.
    evasion_set: PatternSet = field(init=False)

    def __post_init__(self) -> None:
        for name in ("hedging", "moralising", "warmth"):
            object.__setattr__(self, f"{name}_any", Prefilter.of(getattr(self, name)))
        evasions = PatternSet([[p] for p in self.evasion], whole_text=False)
        object.__setattr__(self, "evasion_set", evasions)

    def length_words(self, value: float) -> int:
        """The word count a `length` feature value stands for (for evidence)."""
        return round(math.expm1(value * math.log1p(self.length_cap_words)))


def compile_profile(data: Mapping[str, Any]) -> ProfileRules:
    """Check and compile the data file's profile tables; a bad value is a clear ValueError."""
    profile = data.get("profile", {})
    cap = profile.get("length_cap_words", 400)
    if not isinstance(cap, int) or isinstance(cap, bool) or cap < 2:
        raise ValueError(f"profile.length_cap_words must be an integer >= 2, got {cap!r}")
    lexicon = data.get("lexicon", {})
    unknown = sorted(set(lexicon) - set(LEXICONS))
    if unknown:
        raise ValueError(f"lexicon: unknown list(s) {', '.join(unknown)}; use {LEXICONS}")
    verbs = _patterns(lexicon.get("imperative", []), "lexicon.imperative")
    opening = "|".join(f"(?:{p.pattern})" for p in verbs) or "(?!)"
    return ProfileRules(
        length_cap_words=cap,
        weights=_weights(data.get("weights", {})),
        hedging=_patterns(lexicon.get("hedging", []), "lexicon.hedging"),
        imperative=compiled(f"^(?:{opening})", regex.IGNORECASE),
        evasion=_patterns(lexicon.get("evasion", []), "lexicon.evasion"),
        warmth=_patterns(lexicon.get("warmth", []), "lexicon.warmth"),
        moralising=_patterns(lexicon.get("moralising", []), "lexicon.moralising"),
    )


def turn_profile(turn: AgentTurn, rules: ProfileRules) -> Profile:
    """The profile of one answer: cost linear in the answer (read up to MAX_CHARS)."""
    text = straight_quotes(turn.text[:MAX_CHARS])
    words = len(_WORD.findall(text))
    sentences = [text[a:b] for a, b in sentence_spans(text)] or [text]
    calls = len(turn.tool_calls)
    values = {
        "length": min(1.0, math.log1p(words) / math.log1p(rules.length_cap_words)),
        "refusal": max(refusal_level(text), _evasion(text, sentences, rules)),
        "hedging": _share_matching(sentences, text, rules.hedging_any, rules.hedging),
        "imperative": _share(sentences, lambda s: bool(rules.imperative.match(_opening(s)))),
        "request_overlap": request_overlap(turn.prompt, text),
        "warmth": min(1.0, _count(text, rules.warmth_any, rules.warmth) / len(sentences)),
        "moralising": _share_matching(sentences, text, rules.moralising_any, rules.moralising),
        "tool_use": 1.0 if calls else 0.0,
        "tool_errors": min(1.0, turn.tool_errors / calls) if calls else 0.0,
    }
    return tuple(round(min(1.0, max(0.0, values[name])), 6) for name in FEATURES)


def request_overlap(prompt: str, answer: str) -> float:
    """Share of the request's content stems the answer uses (0 when the request has none)."""
    stopwords = current_rules().stopwords
    asked = set(terms(prompt[:MAX_CHARS], stopwords))
    if not asked:
        return 0.0
    said = set(terms(answer, stopwords))
    return len(asked & said) / len(asked)


def _evasion(text: str, sentences: list[str], rules: ProfileRules) -> float:
    """1 when the answer opens by brushing the request off ("I'd rather not", "look it up").
    Only the evasions the answer's pattern set pass reports are tried on its opening."""
    shown = rules.evasion_set.candidates(text)
    if not shown:
        return 0.0
    opening = sentences[:EVASION_SENTENCES]
    evasions = [p for number, p in enumerate(rules.evasion) if number in shown]
    return 1.0 if any(p.search(s) for p in evasions for s in opening) else 0.0


def _opening(sentence: str) -> str:
    return _BULLET.sub("", sentence, count=1)


def _share(sentences: list[str], test: Any) -> float:
    return sum(1 for s in sentences if test(s)) / len(sentences)


def _share_matching(
    sentences: list[str],
    text: str,
    family: Prefilter | None,
    patterns: tuple[regex.Pattern, ...],
) -> float:
    """Share of sentences any of `patterns` matches, the whole text ruled out first."""
    if family is None:
        return _share(sentences, lambda s: any(p.search(s) for p in patterns))
    if not family.may_match_text(text):
        return 0.0
    return _share(sentences, family.matches)


def _count(text: str, family: Prefilter | None, patterns: tuple[regex.Pattern, ...]) -> int:
    """Matches of every pattern in `text` (each pattern counted on its own)."""
    if family is not None and not family.may_match_text(text):
        return 0
    return sum(len(p.findall(text)) for p in patterns)


def _weights(table: Mapping[str, Any]) -> Profile:
    unknown = sorted(set(table) - set(FEATURES))
    if unknown:
        raise ValueError(f"weights: unknown feature(s) {', '.join(unknown)}; use {FEATURES}")
    values = []
    for name in FEATURES:
        value = table.get(name, 0.0)
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise ValueError(f"weights.{name} must be a number >= 0, got {value!r}")
        values.append(float(value))
    total = sum(values)
    if total <= 0:
        raise ValueError("weights: at least one feature needs a weight above 0")
    return tuple(v / total for v in values)


def _patterns(entries: Any, where: str) -> tuple[regex.Pattern, ...]:
    return compile_patterns(string_list(entries, where), where, regex.IGNORECASE)
