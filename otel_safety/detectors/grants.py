"""What a declared task allows: the action categories its own words grant.

A task grants a category by saying so in plain language ("clean up the build directory"
grants file_destroy), so grants are phrases rather than regexes: inflections and a few words
in between still match, and a phrase right after a negation ("do not delete") grants nothing.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import regex

if TYPE_CHECKING:  # the taxonomy compiles its grant phrases with `grant_pattern`
    from otel_safety.detectors.taxonomy import Taxonomy

__all__ = ["grant_pattern", "granted_categories"]

_GAP = r"(?:[\w'\u2019-]+[\s,]+){0,3}?"  # the "*" of a grant phrase: up to three words
_VOWELS = "aeiou"
_CLAUSE_END = regex.compile(r"[.!?;:\n]|\bbut\b", regex.IGNORECASE)
_WORD = regex.compile(r"[\w']+")


def granted_categories(scope: str, taxonomy: Taxonomy) -> dict[str, str]:
    """The categories a task grants, each with the words that granted it."""
    text = scope.replace("\u2019", "'")
    granted: dict[str, str] = {}
    for category in taxonomy.categories.values():
        if not category.grants:
            continue
        match = next(
            (
                m
                for m in _any_of(tuple(category.grants)).finditer(text)
                if not _negated(text, m.start(), taxonomy)
            ),
            None,
        )
        if match:
            granted[category.name] = match.group(0)
    return granted


@functools.cache
def _any_of(patterns: tuple[regex.Pattern, ...]) -> regex.Pattern:
    """One alternation per category: a task is scanned once per category, not per phrase."""
    return regex.compile("|".join(f"(?:{p.pattern})" for p in patterns), regex.IGNORECASE)


def grant_pattern(phrase: str) -> regex.Pattern:
    """A grant phrase as a regex: words on boundaries, inflected, "*" for up to three words."""
    tokens = phrase.lower().split()
    parts: list[str] = []
    for index, token in enumerate(tokens):
        if token == "*":
            parts.append(_GAP)
            continue
        parts.append(_inflect(token))
        if index + 1 < len(tokens):
            parts.append(r"[\s-]+" if tokens[index + 1] == "*" else r"[\s-]*")
    return regex.compile(r"\b" + "".join(parts) + r"\b", regex.IGNORECASE)


def _inflect(word: str) -> str:
    """A word and its regular inflections, so "delete" also grants via "deleting"."""
    if not word.isalpha() or len(word) < 3:
        return regex.escape(word)
    stem = regex.escape(word[:-1])
    if word.endswith("e"):
        return f"{stem}(?:e|es|ed|ing)"
    if word.endswith("y") and word[-2] not in _VOWELS:
        return f"{stem}(?:y|ies|ied|ying)"
    forms = f"{regex.escape(word)}(?:s|es|ed|ing)?"
    if word[-1] not in _VOWELS + "wxy" and word[-2] in _VOWELS and word[-3] not in _VOWELS:
        forms += f"|{regex.escape(word + word[-1])}(?:ed|ing)"  # stop -> stopped
    return f"(?:{forms})"


def _negated(text: str, start: int, taxonomy: Taxonomy) -> bool:
    """A phrase after "do not" grants nothing: look a few words back in the same clause."""
    if taxonomy.negation_window <= 0:
        return False
    clause = _CLAUSE_END.split(text[max(0, start - 120) : start])[-1]
    words = _WORD.findall(clause.lower())[-taxonomy.negation_window :]
    return any(word in taxonomy.negations for word in words)
