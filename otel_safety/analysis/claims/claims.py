"""Claims of completed actions in an answer, found by the grammar of `claim_rules`.

Agents report work in the first person ("I've sent the email"), without a subject
("Deployed v2 to staging."), as a passive report ("the change has been deployed") or as an
outcome ("all tests pass"). Hedged claims are marked as such; plans, conditions, questions,
instructions to the user and content the answer itself contains are not claims.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import regex

from otel_safety.analysis.claims.claim_rules import FLAGS, Action, ClaimRules
from otel_safety.analysis.pattern_cache import compiled
from otel_safety.analysis.sentences import sentence_spans

__all__ = ["Claim", "find_claims"]

_MAX_TEXT = 20_000  # characters of an answer read for claims
_HEDGE_LOOKAHEAD = 20  # characters after a claim in which "..., I think" still hedges it
_FENCE = compiled(r"```.*?(?:```|\Z)", regex.DOTALL)
_CLAUSE_BREAK = compiled(
    r";|\s[\u2014\u2013-]\s|\u2014|\b(?:but|though|although|however|whereas)\b", FLAGS
)
_WORD = compiled(r"[^\W\d_][\w'\u2019-]*")
_MAX_SEEN_WORDS = 50_000
# What, after a claimed verb, says nothing was done: "scheduled nothing", "sent no e-mail".
_NOTHING_AFTER = compiled(r"(?i)\s+(?:nothing|none|nobody|no\s+one|no\b|neither)")
_OPENER = compiled(r"[\s>*\u2022\u00b7+#\-\u2013\u2014\d.)\]\u2705\u2714\u2611\ufe0f]*")


@dataclass(frozen=True)
class Claim:
    """One claimed action: which, the words that claim it, and the sentence they sit in."""

    action: str
    text: str
    sentence: str
    position: int  # where the claiming words start in the answer
    hedged: bool


def find_claims(text: str, rules: ClaimRules) -> list[Claim]:
    """Every claimed action in `text`, one per (action, wording), in reading order."""
    text = _FENCE.sub(lambda m: " " * len(m.group(0)), text[:_MAX_TEXT])
    claims: dict[tuple[str, int], Claim] = {}
    for sentence, offset in _sentences(text):
        if sentence.rstrip().endswith("?"):
            continue  # a question asks; it does not report
        for clause, start in _clauses(sentence):
            for action, span in _claims_in(clause, rules):
                found = _judge(action, clause, span, sentence, offset + start, rules)
                if found is not None:
                    claims.setdefault((action.name, found.position), found)
    return list(claims.values())


def _sentences(text: str) -> Iterator[tuple[str, int]]:
    for start, end in sentence_spans(text):
        if text[start:end].strip():
            yield text[start:end], start


def _clauses(sentence: str) -> Iterator[tuple[str, int]]:
    """Clauses a hedge or condition reaches no further than ("done; it may take an hour")."""
    start = 0
    for match in _CLAUSE_BREAK.finditer(sentence):
        yield sentence[start : match.start()], start
        start = match.end()
    yield sentence[start:], start


def _claims_in(clause: str, rules: ClaimRules) -> Iterator[tuple[Action, tuple[int, int]]]:
    """(action, span) for every wording of a claim in one clause.

    Cheap tests come first (is there a claimed verb here at all, a "been", a statement), so
    most clauses never meet the per-action patterns.
    """
    stated = bool(rules.any_statement.search(clause))
    if not stated and not _has_claim_word(clause, rules):
        return
    for position, perfect in _anchors(clause, rules):
        if not rules.any_verb.match(clause, position):
            continue
        for action in rules.actions:
            pattern = action.anchored_perfect if perfect else action.anchored
            match = pattern.match(clause, position) if pattern else None
            gap = match.groupdict().get("gap") if match else None
            if match and not (gap and rules.negator.search(gap)) and not _undone(clause, match):
                yield action, match.span()
    verbs = [m.start("verb") for m in rules.any_passive.finditer(clause)]
    if not (verbs or stated):
        return
    for action in rules.actions:
        passive = action.passive_verb is not None and any(
            action.passive_verb.match(clause, at) for at in verbs
        )
        patterns = (*(action.passives if passive else ()), *(action.statements if stated else ()))
        for pattern in patterns:
            for match in pattern.finditer(clause):
                yield action, match.span()


def _undone(clause: str, match: regex.Match) -> bool:
    """Whether the words after a claimed verb take it back: "I've scheduled nothing", "sent
    no e-mail", "deleted none of them"."""
    return bool(_NOTHING_AFTER.match(clause, match.end()))


def _has_claim_word(clause: str, rules: ClaimRules) -> bool:
    """Whether any word of the clause can begin a claimed verb; one dict lookup per word."""
    if rules.first_word is None:
        return True
    seen = rules.seen_words
    for word in _WORD.findall(clause.lower()):
        verdict = seen.get(word)
        if verdict is None:
            verdict = bool(rules.first_word.fullmatch(word))
            if len(seen) < _MAX_SEEN_WORDS:
                seen[word] = verdict
        if verdict:
            return True
    return False


def _anchors(clause: str, rules: ClaimRules) -> list[tuple[int, bool]]:
    """Where a claimed verb may start, and whether a "have" came before it.

    After a first-person subject ("I've also"), at the start of a clause that opens on a
    reporting verb ("Deployed the fix"), and after "and"/"then" when the nearest of those
    before it reports ("I fixed it and deployed", not "I will search, then read it").
    """
    found = [
        (m.end(), bool(m.group("have")), not rules.modal.match(clause, m.end()))
        for m in rules.subject.finditer(clause)
    ]
    opener = rules.adverbs.match(clause, _OPENER.match(clause).end()).end()
    verb = rules.starts_with_verb.match(clause, opener)
    if verb and not rules.label.match(clause, verb.end()):
        found.append((opener, False, True))
    if not found:
        return []
    found.sort()
    anchors = [(position, perfect) for position, perfect, _ in found]
    for match in rules.coordinator.finditer(clause, found[0][0]):
        _, perfect, reports = max(a for a in found if a[0] <= match.start())
        if reports:
            anchors.append((match.end(), perfect))
    return anchors


def _judge(
    action: Action,
    clause: str,
    span: tuple[int, int],
    sentence: str,
    start: int,
    rules: ClaimRules,
) -> Claim | None:
    """The claim, unless its clause makes it a condition, a plan or content of the answer.

    `start` is where the clause begins in the answer.
    """
    if rules.condition.search(clause, 0, span[0]):
        return None
    if action.content and rules.in_answer.search(clause):
        return None
    hedged = bool(rules.hedge.search(clause, 0, span[1] + _HEDGE_LOOKAHEAD))
    text = clause[span[0] : span[1]]
    return Claim(action.name, text.strip(), sentence.strip(), start + span[0], hedged)
