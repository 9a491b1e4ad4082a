"""Facts an agent states, and whether a later one contradicts an earlier one.

Two kinds of statement are read from each clause of an answer:

- State facts: "<subject> is/was/has/costs/opens ... <predicate>". The subject and the
  predicate become sets of word stems; numbers and capitalised names in the predicate are
  its values. Two facts are about the same thing when their subjects overlap enough and
  their verbs agree. They contradict when one negates the other ("X is safe" / "X is not
  safe", same values), or when both assert a value of the same kind and the values share
  nothing (a different number, date or name for the same predicate).
- First-person actions: "I sent the invoice" / "I have not sent it". The action is named
  by the `deception` detector's claim grammar where it recognises it (so "emailed" and
  "sent the email" are one action), else by the verb. A reversal contradicts, except a
  "not done" followed by "done" in a turn that used tools: that is progress, not deception.

Limits: a shallow parse. Pronoun subjects ("it is 5") are skipped, so a contradiction about
"it" is missed; a subject worded differently in each turn ("the tower" / "the Eiffel Tower")
may not meet; a fact that changed between turns looks like a contradiction unless the
answer says so ("now", "no longer"), which only lowers the score.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import regex

from otel_safety.analysis.claims.claim_rules import current_rules as claim_rules
from otel_safety.analysis.claims.claims import find_claims
from otel_safety.analysis.pattern_cache import compiled
from otel_safety.analysis.patterns.data_checks import check_keys, check_weight, string_list
from otel_safety.analysis.sentences import sentence_spans
from otel_safety.analysis.text.monitor_rules import terms
from otel_safety.behavior.rhetoric import lexicon_pattern, word_set

__all__ = ["Conflict", "ContradictionRules", "Fact", "compile_contradiction", "conflicts"]

FLAGS = regex.IGNORECASE
_KINDS = ("value_conflict", "negation", "action_reversal")
_NT = r"(?:n['\u2019]t)"
_VERB = compiled(
    rf"""\b(?:(?P<verb>is|are|was|were|has|have|had){_NT}?
        |(?:does|do|did)(?:\s+not\b|{_NT})\s+(?P<verb>[a-z]+)
        |(?P<verb>costs?|weighs?|measures?|equals?|contains?|lasts?|takes?|took|holds?|held
           |opens?|closes?|starts?|ends?|happened|occurred|falls?|fell|reached))\b""",
    FLAGS | regex.VERBOSE,
)
_NEGATED = compiled(rf"{_NT}\Z|\bnot\b", FLAGS)
_NOT_AFTER = compiled(r"\s+(?:not|never|no\s+longer)\b", FLAGS)
_CLAUSE = compiled(r";|,\s*(?:but|however|whereas|while|and)\b|\s[\u2014\u2013-]\s", FLAGS)
_OPENER = compiled(
    r"^[\s>*\u2022#\-\d.)]*(?:(?:yes|no|so|also|however|well|ok|okay|note|actually|indeed|"
    r"in\s+fact|as\s+I\s+said|to\s+confirm|just\s+to\s+confirm)\b[,:]?\s*)*",
    FLAGS,
)
_SUBORDINATE = compiled(
    r"\b(?:if|when|whether|unless|because|while|since|although|though|whereas|once|until"
    r"|before|after|how|why|what|where|who|I|we|you|not|no|never|without|except|other"
    r"|another|each|every|any)\b",
    FLAGS,
)
_FENCE = compiled(r"```.*?(?:```|\Z)", regex.DOTALL)
_PROGRESSIVE = compiled(r"(?:not\s+|never\s+|still\s+|also\s+)?\w+ing\b", FLAGS)
_NUMBER = compiled(r"\d[\d,]*(?:\.\d+)?")
_NAME = compiled(r"\b[A-Z][a-z][\w'-]*")
_ACTOR = compiled(
    rf"\b(?-i:I|[Ww]e)(?P<aux>\s+(?:have|has|had|did|do)(?=\b|n['\u2019]t\b)|['\u2019]ve\b)?"
    rf"(?P<neg>\s+not\b|{_NT}|\s+never\b)?"
    r"(?:\s+(?:yet|already|actually|also|just|successfully|ever|even|really))*"
    r"\s+(?P<verb>[a-z]+)\b(?P<rest>[^.;:!?,]{0,60})",
    FLAGS,
)


@dataclass(frozen=True)
class Fact:
    """One statement of one turn: what it is about, what it says, and whether it negates."""

    turn: int
    kind: str  # "state" or "action"
    subject: frozenset[str]
    verb: str
    predicate: frozenset[str]
    negated: bool
    sentence: str
    numbers: frozenset[str] = frozenset()
    names: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Conflict:
    kind: str  # value_conflict, negation or action_reversal
    weight: float
    earlier: Fact
    later: Fact


@dataclass(frozen=True)
class ContradictionRules:
    weights: Mapping[str, float]
    subject_overlap: float
    predicate_overlap: float
    max_predicate_terms: int
    irregular: Mapping[str, str]  # a verb form -> its base ("sent" -> "send")
    past: Mapping[str, str]  # a base -> its simple past ("send" -> "sent")
    not_actions: frozenset[str]
    corrections: regex.Pattern
    changes: regex.Pattern
    stopwords: frozenset[str]
    vague: frozenset[str]


def compile_contradiction(table: Mapping[str, Any]) -> ContradictionRules:
    """The `[contradiction]` table, checked."""
    where = "contradiction"
    lists = ("corrections", "changes", "stopwords", "vague_subjects", "verbs", "not_actions")
    numbers = ("subject_overlap", "predicate_overlap", "max_predicate_terms")
    check_keys(table, {*_KINDS, *numbers, *lists}, where)
    most = table.get("max_predicate_terms")
    if not isinstance(most, int) or isinstance(most, bool) or most < 0:
        raise ValueError(f"{where}.max_predicate_terms must be a whole number >= 0, got {most!r}")

    def pattern(key: str) -> regex.Pattern:
        return lexicon_pattern(table, key, where)

    def words(key: str) -> frozenset[str]:
        return word_set(table, key, where)

    return ContradictionRules(
        weights={kind: check_weight(table.get(kind), f"{where}.{kind}") for kind in _KINDS},
        subject_overlap=check_weight(table.get("subject_overlap"), f"{where}.subject_overlap"),
        predicate_overlap=check_weight(
            table.get("predicate_overlap"), f"{where}.predicate_overlap"
        ),
        max_predicate_terms=most,
        **_verb_forms(string_list(table.get("verbs", []), f"{where}.verbs")),
        not_actions=words("not_actions"),
        corrections=pattern("corrections"),
        changes=pattern("changes"),
        stopwords=words("stopwords"),
        vague=words("vague_subjects"),
    )


def _verb_forms(entries: list[str]) -> dict[str, Mapping[str, str]]:
    """ "send sent" lines: the base, then its simple past, then any other forms."""
    irregular: dict[str, str] = {}
    past: dict[str, str] = {}
    for entry in entries:
        base, *forms = entry.lower().split()
        if not forms:
            raise ValueError(f"contradiction.verbs: {entry!r} needs a base and its past forms")
        past.setdefault(base, forms[0])
        irregular.update({form: base for form in forms})
    return {"irregular": irregular, "past": past}


def extract_facts(text: str, turn: int, rules: ContradictionRules) -> list[Fact]:
    """The state facts and first-person actions stated in `text` (questions left out)."""
    facts: list[Fact] = []
    text = _FENCE.sub(lambda m: " " * len(m.group(0)), text)  # offsets kept
    for start, end in sentence_spans(text):
        sentence = text[start:end].strip()
        if not sentence or sentence.endswith("?"):
            continue
        for clause in _CLAUSE.split(sentence):
            fact = _state_fact(clause, sentence, turn, rules)
            facts.extend([fact] if fact else _action_facts(clause, sentence, turn, rules))
    return facts


def _state_fact(clause: str, sentence: str, turn: int, rules: ContradictionRules) -> Fact | None:
    clause = clause[_OPENER.match(clause).end() :]
    verb = _VERB.search(clause)
    if verb is None:
        return None
    subject_text = clause[: verb.start()]
    if len(subject_text.split()) > 8 or _SUBORDINATE.search(subject_text):
        return None
    subject = _words(subject_text, rules)
    predicate_text = " ".join(clause[verb.end() :].split()[:24])
    if not subject - rules.vague or _PROGRESSIVE.match(predicate_text):
        return None
    negated = bool(_NEGATED.search(verb.group(0)) or _NOT_AFTER.match(clause, verb.end()))
    numbers = frozenset(_number(n) for n in _NUMBER.findall(predicate_text))
    names = frozenset(n.lower() for n in _NAME.findall(predicate_text))
    plain = _NUMBER.sub(" ", _NAME.sub(" ", predicate_text))
    verb_key = _verb_key(verb.group("verb"), rules)
    predicate = _words(plain, rules)
    return Fact(turn, "state", subject, verb_key, predicate, negated, sentence, numbers, names)


def _action_facts(clause: str, sentence: str, turn: int, rules: ContradictionRules) -> list[Fact]:
    facts = []
    for match in _ACTOR.finditer(clause):
        verb, aux, negated = match.group("verb").lower(), match.group("aux"), bool(match["neg"])
        if verb in rules.not_actions or not _reports(verb, aux, negated, rules):
            continue
        done = f"I {_past(verb, rules)}{match.group('rest')}"
        claimed = [c.action for c in find_claims(done, claim_rules()) if not c.hedged]
        objects = _words(match.group("rest"), rules) - rules.vague
        key = _verb_key(verb, rules)
        facts.append(
            Fact(turn, "action", frozenset({key, *claimed}), key, objects, negated, sentence)
        )
    return facts


def conflicts(
    facts: Iterable[Fact], earlier: Iterable[Fact], rules: ContradictionRules, progressed: bool
) -> list[Conflict]:
    """Each new fact against the remembered ones of earlier turns; the latest conflict per
    new fact. `progressed`: the new turn used tools, so "not done" then "done" is progress."""
    remembered = list(earlier)
    found = []
    for fact in facts:
        for old in reversed(remembered):
            kind = _contradiction(old, fact, rules, progressed)
            if kind and old.turn != fact.turn:
                found.append(Conflict(kind, rules.weights[kind], old, fact))
                break
    return found


def _contradiction(old: Fact, new: Fact, rules: ContradictionRules, progressed: bool) -> str | None:
    if old.kind != new.kind:
        return None
    alike = _jaccard(old.predicate, new.predicate) >= rules.predicate_overlap
    if new.kind == "action":  # the same verb, or the same action in the claim grammar
        if old.subject.isdisjoint(new.subject):
            return None
        empty = not (old.predicate and new.predicate)
        if old.negated == new.negated or not (alike or empty):
            return None
        return None if (old.negated and progressed) else "action_reversal"
    if old.verb != new.verb or _jaccard(old.subject, new.subject) < rules.subject_overlap:
        return None
    if old.negated != new.negated:
        same_values = old.numbers == new.numbers and old.names == new.names
        has_content = bool(old.predicate or old.numbers or old.names)
        return "negation" if alike and same_values and has_content else None
    if old.negated or not alike or len(old.predicate | new.predicate) > rules.max_predicate_terms:
        return None  # a long description is not one value one can contradict
    # One kind of value differs while the other agrees ("March 3" / "March 5"); a changed
    # qualifier ("10am" / "9am on Sundays") is another statement, not a contradiction.
    if old.numbers and new.numbers and old.names == new.names:
        return "value_conflict" if old.numbers.isdisjoint(new.numbers) else None
    if old.names and new.names and old.numbers == new.numbers:
        return "value_conflict" if old.names.isdisjoint(new.names) else None
    return None


def _reports(verb: str, aux: str | None, negated: bool, rules: ContradictionRules) -> bool:
    """Whether the verb form reports a done (or not done) action for its auxiliary."""
    past = verb in rules.irregular or verb.endswith("ed")
    if aux and aux.strip().lower() in {"did", "do"}:
        return (negated and not past) or not negated
    return past


def _past(verb: str, rules: ContradictionRules) -> str:
    """A base or participle form turned into the past tense the claim grammar reads."""
    if verb.endswith("ed"):
        return verb
    if verb in rules.irregular:
        return rules.past[rules.irregular[verb]]
    return rules.past.get(verb) or (verb + "d" if verb.endswith("e") else verb + "ed")


def _verb_key(verb: str, rules: ContradictionRules) -> str:
    verb = verb.lower()
    if verb in {"is", "are", "was", "were"}:
        return "be"
    if verb in {"has", "have", "had"}:
        return "have"
    verb = rules.irregular.get(verb, verb)
    for suffix, keep in (("ied", "y"), ("ed", ""), ("es", ""), ("s", "")):
        if verb.endswith(suffix) and len(verb) - len(suffix) >= 3:
            verb = verb[: -len(suffix)] + keep
            break
    if len(verb) > 3 and verb[-1] == verb[-2]:
        verb = verb[:-1]
    return verb.rstrip("e") or verb


def _number(text: str) -> str:
    """One spelling per value, so that 3.5 / 3.50, 330 / 330.0 / 0330 and 1,500 / 1500 are
    the same number: separators, leading zeros and trailing decimal zeros dropped. Done on
    the digits rather than through float or Decimal, so a 5,000-digit run stays exact."""
    whole, _, fraction = text.replace(",", "").rstrip(".").partition(".")
    whole, fraction = whole.lstrip("0") or "0", fraction.rstrip("0")
    return f"{whole}.{fraction}" if fraction else whole


def _words(text: str, rules: ContradictionRules) -> frozenset[str]:
    return frozenset(terms(text, rules.stopwords))


def _jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)
