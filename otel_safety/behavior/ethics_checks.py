"""The checks of the `ethics_boundary` monitor, each a pure function of one answer.

Every check returns `Hit`s: which check, how strong (0-1), the quote that earned it (values
masked) and details. The rule-based checks (bias, fairness, manipulation, custom boundaries)
read the answer a sentence at a time, so that a sentence which condemns, quotes or negates
what it mentions ("the stereotype that ... is false") excuses its own match. Harmful content
reuses the refusal family's signals rather than a lexicon of its own. Privacy looks for
values shaped like personal data (checked where a checksum exists) that the user did not
give themselves.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import regex

from otel_safety.analysis.memo import content_memo
from otel_safety.analysis.pattern_cache import compiled
from otel_safety.analysis.patterns.data_checks import string_list
from otel_safety.analysis.patterns.data_patterns import any_of, checked_alternation, compile_pattern
from otel_safety.analysis.prefilter import Prefilter
from otel_safety.analysis.refusal.refusal import (
    adversarial_score,
    answer_score,
    compliance_score,
    input_risk,
    refusal_score,
)
from otel_safety.analysis.sentences import sentence_spans
from otel_safety.detectors.base import clip

__all__ = [
    "CHECKS",
    "Hit",
    "PrivacyRules",
    "RuleSet",
    "compile_custom",
    "compile_privacy",
    "compile_rules",
    "contact_values",
    "harmful_content",
    "luhn",
    "privacy",
    "rule_hits",
    "user_values",
]

CHECKS = ("harmful_content", "bias", "fairness", "privacy", "manipulation")
FLAGS = regex.IGNORECASE
_VOCAB_REF = compiled(r"\{\{(\w+)\}\}")
_QUOTED = compiled(r"\"[^\"\n]{3,200}\"|“[^”\n]{3,200}”")


@dataclass(frozen=True)
class Hit:
    """One check's judgement of one passage of an answer."""

    check: str
    score: float
    quote: str
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Rule:
    name: str
    score: float
    pattern: regex.Pattern


@dataclass(frozen=True)
class RuleSet:
    """Compiled patterns of one sentence-level check, with what excuses a match."""

    check: str
    rules: tuple[Rule, ...]
    excuse: regex.Pattern | None = None  # anywhere in the sentence
    negation: regex.Pattern | None = None  # in the sentence before the match
    prefilter: Prefilter | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        object.__setattr__(self, "prefilter", Prefilter.of([r.pattern for r in self.rules]))


# --- compiling ---------------------------------------------------------------------------


def _expand(pattern: str, vocab: Mapping[str, list[str]], where: str) -> str:
    def words(match: regex.Match) -> str:
        if match.group(1) not in vocab:
            raise ValueError(f"{where}: unknown word list {match.group(0)}")
        return f"(?:{any_of(vocab[match.group(1)])})"

    return _VOCAB_REF.sub(words, pattern)


def _score(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1:
        raise ValueError(f"{where}: score must be a number in (0, 1], got {value!r}")
    return float(value)


def compile_rules(check: str, table: Mapping[str, Any]) -> RuleSet:
    """A `[bias]`-shaped data table: `rules` (name, score, pattern), `excuse`, `negation`
    and the word lists of `[<check>.vocab]`."""
    vocab = {
        name: string_list(entries, f"{check}.vocab.{name}")
        for name, entries in (table.get("vocab") or {}).items()
    }
    rules = []
    for number, rule in enumerate(table.get("rules") or []):
        where = f"{check}.rules[{number}]"
        if not isinstance(rule, Mapping) or "pattern" not in rule:
            raise ValueError(f"{where}: a rule is a table with name, score and pattern")
        source = _expand(str(rule["pattern"]), vocab, where)
        name = str(rule.get("name") or f"rule_{number}")
        pattern = compile_pattern(source, f"{where} ({name})", FLAGS, quote_source=False)
        rules.append(Rule(name, _score(rule.get("score", 0.5), where), pattern))
    return RuleSet(
        check,
        tuple(rules),
        _optional(table.get("excuse"), f"{check}.excuse"),
        _optional(table.get("negation"), f"{check}.negation"),
    )


def compile_custom(boundaries: Mapping[str, Any], score: float) -> tuple[RuleSet, ...]:
    """User boundaries: name -> patterns; a bad pattern names its boundary."""
    rule_sets = []
    for name, patterns in boundaries.items():
        where = f"custom boundary {name!r}"
        if isinstance(patterns, str):
            patterns = [patterns]
        sources = string_list(patterns, where)
        rules = tuple(
            Rule(name, score, compile_pattern(source, where, FLAGS)) for source in sources
        )
        rule_sets.append(RuleSet(name, rules))
    return tuple(rule_sets)


def _optional(entries: Any, where: str) -> regex.Pattern | None:
    if not entries:
        return None
    source = checked_alternation(string_list(entries, where), where, FLAGS)
    return compile_pattern(source, where, FLAGS, quote_source=False)


# --- sentence-level rules ----------------------------------------------------------------


def rule_hits(rules: RuleSet, text: str) -> list[Hit]:
    """The strongest unexcused match of each rule set in `text`, sentence by sentence."""
    best: Hit | None = None
    prefilter = rules.prefilter
    if prefilter is not None and not prefilter.may_match_text(text):
        return []
    for start, end in sentence_spans(text):
        sentence = text[start:end]
        if prefilter is not None and not prefilter.matches(sentence):
            continue
        if rules.excuse is not None and rules.excuse.search(sentence):
            continue
        for rule in rules.rules:
            for match in rule.pattern.finditer(sentence):
                if _excused(rules, sentence, match):
                    continue
                if best is None or rule.score > best.score:
                    best = Hit(
                        rules.check,
                        rule.score,
                        clip(sentence),
                        {"rule": rule.name, "match": clip(match.group(0), 120)},
                    )
                break
    return [best] if best else []


def _excused(rules: RuleSet, sentence: str, match: regex.Match) -> bool:
    """Negated before the match in its sentence, or inside quotation marks."""
    if rules.negation is not None and rules.negation.search(sentence[: match.start()]):
        return True
    return any(q.start() <= match.start() < q.end() for q in _QUOTED.finditer(sentence))


# --- harmful content ---------------------------------------------------------------------


def harmful_content(prompt: str, answer: str) -> list[Hit]:
    """A harmful request answered: the under_refusal reading (harm or jailbreak markers in
    the request times how much the answer is a real answer) and the jailbreak_compliance
    reading (a jailbreak attempt times compliance), whichever is stronger."""
    risk = input_risk(prompt)
    if not risk.score:
        return []
    given = answer_score(answer)
    score, kind, quote = risk.score * given.score, given.kind, given.text
    attempt = adversarial_score(prompt)
    if attempt.score:
        complied = compliance_score(answer)
        if attempt.score * complied.score > score:
            score, kind, quote = attempt.score * complied.score, complied.kind, complied.text
    if not score:
        return []
    refusal = refusal_score(answer)
    detail = {
        "request_marker": risk.kind,
        "request_quote": clip(risk.text, 120),
        "answer": kind,
        "refusal": refusal.kind or None,
    }
    return [Hit("harmful_content", round(score, 4), clip(quote), detail)]


# --- privacy -----------------------------------------------------------------------------


@dataclass(frozen=True)
class PrivacyRules:
    scores: Mapping[str, float]
    bulk_min: int
    bulk_step: float
    ssn: regex.Pattern
    card: regex.Pattern
    test_cards: frozenset[str]
    passport: regex.Pattern
    email: regex.Pattern
    phone: regex.Pattern
    street: regex.Pattern
    home_cues: regex.Pattern
    name: regex.Pattern
    health: regex.Pattern
    not_names: frozenset[str]


def compile_privacy(table: Mapping[str, Any]) -> PrivacyRules:
    def pattern(key: str, flags: int = FLAGS) -> regex.Pattern:
        if not isinstance(table.get(key), str):
            raise ValueError(f"privacy.{key}: a pattern (string) is required")
        return compile_pattern(table[key], f"privacy.{key}", flags)

    kinds = ("ssn", "card", "passport", "home_address", "health", "bulk_contacts")
    given = table.get("scores") or {}
    unknown = sorted(set(given) - set(kinds))
    if unknown:
        raise ValueError(f"privacy.scores: unknown kind(s) {unknown}; known: {list(kinds)}")
    scores = {kind: _score(given.get(kind, 0.5), f"privacy.scores.{kind}") for kind in kinds}
    bulk_min = table.get("bulk_min", 5)
    if not isinstance(bulk_min, int) or bulk_min < 2:
        raise ValueError(f"privacy.bulk_min must be an integer >= 2, got {bulk_min!r}")
    return PrivacyRules(
        scores=scores,
        bulk_min=bulk_min,
        bulk_step=float(table.get("bulk_step", 0.05)),
        ssn=pattern("ssn"),
        card=pattern("card"),
        test_cards=frozenset(string_list(table.get("test_cards", []), "privacy.test_cards")),
        passport=pattern("passport"),
        email=pattern("email"),
        phone=pattern("phone"),
        street=pattern("street", regex.VERSION1),
        home_cues=_optional(table.get("home_cues"), "privacy.home_cues") or regex.compile("(?!)"),
        name=pattern("name", regex.VERSION1),
        health=pattern("health"),
        not_names=frozenset(string_list(table.get("not_names", []), "privacy.not_names")),
    )


def luhn(digits: str) -> bool:
    """The card-number checksum: most random digit runs fail it, real card numbers pass."""
    total = 0
    for index, char in enumerate(reversed(digits)):
        value = int(char)
        if index % 2:
            value = value * 2 - 9 if value > 4 else value * 2
        total += value
    return total % 10 == 0


def _digits(text: str) -> str:
    return "".join(c for c in text if c.isdigit())


def _key(kind: str, value: str) -> str:
    """How a value is compared with the user's own: digits only, or lower-cased."""
    if kind in ("ssn", "card", "phone"):
        return _digits(value)
    return " ".join(value.lower().split())


def user_values(rules: PrivacyRules, text: str) -> set[str]:
    """Every personal value the user wrote, keyed as `_key` does, so echoes are skipped."""
    found: set[str] = set()
    for kind in ("ssn", "card", "email", "phone", "street"):
        found |= {_key(kind, m.group(0)) for m in getattr(rules, kind).finditer(text)}
    found |= {_key("passport", m.group(1)) for m in rules.passport.finditer(text)}
    found |= {_key("health", m.group(0)) for m in rules.health.finditer(text)}
    return found


def mask(value: str) -> str:
    """Show the shape of a value, not the value: the last two characters at most."""
    kept = value[-2:] if len(value) > 6 else ""
    body = "".join("#" if c.isalnum() else c for c in value[: len(value) - len(kept)])
    return body + kept


def contact_values(rules: PrivacyRules, texts: Iterable[str]) -> set[str]:
    """Emails and phone numbers in each of `texts`, keyed for comparison. Each text is read
    once (a tool's result shows both as its message and as its call's result) and on its
    own: a contact never runs from one tool result into the next."""
    found: set[str] = set()
    for text in dict.fromkeys(texts):
        found.update(_contacts_in(rules.email, rules.phone, text))
    return found


@content_memo  # every turn of a trace, and the next trace, reads the same tool results
def _contacts_in(email: regex.Pattern, phone: regex.Pattern, text: str) -> frozenset[str]:
    return frozenset(
        _key(kind, m.group(0))
        for kind, pattern in (("email", email), ("phone", phone))
        for m in pattern.finditer(text)
    )


def privacy(
    rules: PrivacyRules, text: str, own: set[str], listed: set[str] | None = None
) -> list[Hit]:
    """Third parties' personal data in the answer, values the user gave excepted; contacts
    the user's own tools returned (`listed`: their inbox, their calendar) are not a bulk
    disclosure either."""
    hits: list[Hit] = []
    masked: list[tuple[int, int]] = []

    def add(kind: str, match: regex.Match, group: int = 0, **detail: Any) -> None:
        masked.append(match.span(group))
        hits.append(Hit("privacy", rules.scores[kind], "", {"kind": kind, **detail}))

    for match in rules.ssn.finditer(text):
        if _key("ssn", match.group(0)) not in own:
            add("ssn", match)
    for match in rules.card.finditer(text):
        digits = _digits(match.group(0))
        real = 13 <= len(digits) <= 19 and luhn(digits) and len(set(digits)) > 2
        if real and digits not in rules.test_cards and digits not in own:
            add("card", match)
    for match in rules.passport.finditer(text):
        if _key("passport", match.group(1)) not in own and any(c.isdigit() for c in match[1]):
            add("passport", match, 1)
    for start, end in sentence_spans(text):
        sentence = text[start:end]
        _sentence_privacy(rules, text, start, sentence, own, add)
    for kind in ("email", "phone"):
        values = {_key(kind, m.group(0)) for m in getattr(rules, kind).finditer(text)}
        values -= own | (listed or set())
        if len(values) >= rules.bulk_min:
            extra = (len(values) - rules.bulk_min) * rules.bulk_step
            score = min(0.9, rules.scores["bulk_contacts"] + extra)
            for m in getattr(rules, kind).finditer(text):
                masked.append(m.span())
            hits.append(Hit("privacy", score, "", {"kind": f"bulk_{kind}", "count": len(values)}))
    if not hits:
        return []
    quote = _masked(text, masked)
    best = max(hits, key=lambda h: h.score)
    kinds = sorted({h.detail["kind"] for h in hits})
    return [Hit("privacy", best.score, quote, {**best.detail, "kinds": kinds})]


def _sentence_privacy(
    rules: PrivacyRules, text: str, offset: int, sentence: str, own: set[str], add: Any
) -> None:
    """Home address or health data of a named person, within one sentence."""
    names = [m for m in rules.name.finditer(sentence) if m.group(0) not in rules.not_names]
    if not names:
        return
    if rules.home_cues.search(sentence):
        for match in rules.street.finditer(sentence):
            if _key("street", match.group(0)) not in own:
                add("home_address", _Shifted(match, offset), person=True)
    for match in rules.health.finditer(sentence):
        if _key("health", match.group(0)) not in own and names[0].start() < match.start():
            add("health", _Shifted(names[0], offset), person=True)  # the name is masked


class _Shifted:
    """A match's span moved from sentence to answer coordinates."""

    def __init__(self, match: regex.Match, offset: int) -> None:
        self._span = (match.start() + offset, match.end() + offset)

    def span(self, group: int = 0) -> tuple[int, int]:
        return self._span


def _masked(text: str, spans: Iterable[tuple[int, int]]) -> str:
    """The answer around the first disclosure, every disclosed value masked."""
    ordered = sorted(set(spans))
    first = ordered[0][0]
    out, last = [], 0
    for start, end in ordered:
        if start < last:
            continue
        out.append(text[last:start])
        out.append(mask(text[start:end]))
        last = end
    out.append(text[last:])
    joined = "".join(out)  # masking keeps lengths, so offsets still hold
    begin = max(0, first - 80)
    return clip(("…" if begin else "") + joined[begin:])
