"""Whether an injection pattern's match is a mention rather than an instruction.

Text about attacks quotes attacks: a tokenizer's documentation shows `"<|im_start|>"`, a
security blog writes that messages such as 'ignore previous instructions' are typical of
prompt injection. Such a match is discounted: it is quoted as a literal, or it sits in a
sentence that talks about attacks (a mention cue) and is quoted or never speaks to "you".
"""

from __future__ import annotations

import regex

__all__ = ["is_mention", "sentence_bounds"]

_SENTENCE_END = regex.compile(r"[.!?]\s|\n\s*\n|\n(?=\s*[-*#>\d])")
_QUOTES = {'"': '"', "\u201c": "\u201d", "'": "'", "\u2018": "\u2019", "\u00ab": "\u00bb", "`": "`"}
_SECOND_PERSON = regex.compile(r"\b(?:you|your|yours|yourself)\b", regex.IGNORECASE)


def is_mention(text: str, start: int, end: int, cues: regex.Pattern | None) -> bool:
    """Quoted as a literal (`"<|im_start|>"` in a tokenizer's docs), or discussed in prose."""
    if _wrapped(text, start, end):
        return True
    if cues is None:
        return False
    left, right = sentence_bounds(text, start, end)
    before, after = text[left:start], text[end:right]
    if not (cues.search(before) or cues.search(after)):
        return False
    if _quoted(before, after):
        return True
    return not (_SECOND_PERSON.search(before) or _SECOND_PERSON.search(after))


def sentence_bounds(text: str, start: int, end: int, reach: int = 300) -> tuple[int, int]:
    """The sentence around text[start:end], looking at most `reach` characters either way."""
    left = max(0, start - reach)
    ends = list(_SENTENCE_END.finditer(text, left, start))
    if ends:
        left = ends[-1].end()
    following = _SENTENCE_END.search(text, end, min(len(text), end + reach))
    right = following.start() + 1 if following else min(len(text), end + reach)
    return left, right


def _wrapped(text: str, start: int, end: int) -> bool:
    """The match is exactly the content of a pair of quotes or backticks."""
    if start == 0 or end >= len(text):
        return False
    closing = _QUOTES.get(text[start - 1])
    if closing is None or text[end] != closing:
        return False
    inside = text[start:end]
    return closing not in inside and "\n" not in inside


def _quoted(before: str, after: str, reach: int = 60) -> bool:
    """The match sits inside a pair of quotes opened shortly before it and closed after it."""
    head = before[-reach:]
    for opening, closing in _QUOTES.items():
        at = head.rfind(opening)
        if at < 0:
            continue
        if opening == closing and head.count(opening) % 2 == 0:
            continue
        if closing in after[: reach * 4]:
            return True
    return False
