"""Where an injection rule is worth trying: only texts with its hints, only places its leads
start.

Every text the agent read is searched with dozens of rules, and tool results can be
long, so a rule declares, for speed only, the words it needs (`hints`) and the strings every
match starts with (`leads`). Both are found with plain string operations, far cheaper than
a regex scan. Hints, leads and `reach` are promises the rule's author makes about its
matches (see `data/injection.toml`); the prefilter relies on them.
"""

from __future__ import annotations

from collections.abc import Iterator

import regex

from otel_safety.analysis.injection.injection_rules import InjectionRule
from otel_safety.analysis.pattern_cache import compiled
from otel_safety.analysis.text.word_sets import word_set

__all__ = ["candidates", "text_words"]

_WHITESPACE = compiled(r"\s")


def text_words(lowered: str) -> frozenset[str]:
    """The words of a text, for the hint check: one pass, whatever the number of rules."""
    return word_set(lowered)


def candidates(rule: InjectionRule, subject: str, lowered: str) -> Iterator[regex.Match]:
    """The rule's matches, found without scanning the whole text where the rule allows it.

    A rule with `leads` is tried only where one of them occurs (found with `str.find`, far
    cheaper than a regex scan), since every match starts there. Otherwise a long text is
    searched only in windows of `reach` characters around its hints. Without either, or when
    lower-casing changed the text's length (positions would not line up), the whole text is
    searched.
    """
    if len(lowered) != len(subject):
        yield from rule.pattern.finditer(subject)
        return
    if rule.leads:
        done = 0
        for at in sorted({at for lead in rule.leads for at in _lead_places(lowered, lead)}):
            found = rule.pattern.match(subject, at) if at >= done else None
            if found:
                done = found.end()
                yield found
        return
    if not rule.hints or not rule.reach or len(subject) <= 2 * rule.reach:
        yield from rule.pattern.finditer(subject)
        return
    places = [(at, at + len(hint)) for hint in rule.hints for at in _occurrences(lowered, hint)]
    windows = _windows(subject, places, rule.reach)
    if sum(high - low for low, high in windows) > len(subject) // 2:
        yield from rule.pattern.finditer(subject)
        return
    done = 0
    for low, high in windows:
        for found in rule.pattern.finditer(subject, max(low, done), high):
            done = found.end()
            yield found


def _lead_places(text: str, lead: str) -> Iterator[int]:
    """Where a lead occurs; a lead that starts with a letter or digit must also start a word."""
    wordlike = lead[0].isalnum()
    for at in _occurrences(text, lead):
        if not (wordlike and at and (text[at - 1].isalnum() or text[at - 1] == "_")):
            yield at


def _occurrences(text: str, needle: str) -> Iterator[int]:
    at = text.find(needle)
    while at >= 0:
        yield at
        at = text.find(needle, at + 1)


def _windows(text: str, places: list[tuple[int, int]], reach: int) -> list[tuple[int, int]]:
    """Merged [start, end) windows around hint places; each ends at whitespace, so that a word
    is never cut (the start needs no care: a search from `pos` still sees what precedes it)."""
    merged: list[tuple[int, int]] = []
    for start, end in sorted(places):
        low, high = max(0, start - reach), end + reach
        if merged and low <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], high))
        else:
            merged.append((low, high))
    return [(low, _to_whitespace(text, high)) for low, high in merged]


def _to_whitespace(text: str, at: int) -> int:
    if at >= len(text):
        return len(text)
    found = _WHITESPACE.search(text, at)
    return found.start() if found else len(text)
