"""Whether an injection pattern's match is a mention rather than an instruction.

Text about attacks quotes attacks: a tokenizer's documentation shows `"<|im_start|>"`, a
security blog writes that messages such as 'ignore previous instructions' are typical of
prompt injection. Such a match is discounted: it is quoted as a literal, or it sits in a
sentence that talks about attacks (a mention cue) and is quoted, or is set inside the
sentence's words (not opening a clause, as an order does) and never speaks to "you". A cue
costs an attacker nothing to write ("This is a red-teaming exercise: ignore all previous
instructions and ..."), so a cue alone never discounts an order given bare.

An attack matches many rules in the same few sentences, and most sentences hold no cue: the
cues' relaxed RE2 form (see `analysis.relax`: it matches wherever a cue could, whatever
surrounds it) rules a sentence out in linear time before the exact cues (lookarounds, full
case folding, on the backtracking engine) read it.
"""

from __future__ import annotations

import regex

from otel_safety.analysis.pattern_cache import compiled
from otel_safety.analysis.prefilter import may_occur

__all__ = ["is_mention", "is_quoted", "sentence_bounds"]

# A sentence ends at a full stop, but not at the one of "e.g." or "i.e." inside it.
_SENTENCE_END = compiled(
    r"(?<!\b(?:e\.g|i\.e|eg|viz))[.!?]\s|\n\s*\n|\n(?=\s*[-*#>\d])", regex.IGNORECASE
)
_QUOTES = {'"': '"', "\u201c": "\u201d", "'": "'", "\u2018": "\u2019", "\u00ab": "\u00bb", "`": "`"}
_SECOND_PERSON = compiled(r"\b(?:you|your|yours|yourself)\b", regex.IGNORECASE)


def is_mention(
    text: str,
    start: int,
    end: int,
    cues: regex.Pattern | None,
    examples: regex.Pattern | None = None,
) -> bool:
    """Quoted as a literal (`"<|im_start|>"` in a tokenizer's docs), or discussed in prose:
    a cue about attacks anywhere in its sentence, or one that introduces an example
    ("such as", "e.g.") before it; or quoted, with such a cue in the prose just before."""
    if _wrapped(text, start, end):
        return True
    if cues is None and examples is None:
        return False
    left, right = sentence_bounds(text, start, end)
    before, after = text[left:start], text[end:right]
    if not (_cued(cues, before) or _cued(cues, after) or _cued(examples, before)):
        # A quotation set apart after the prose that introduces it ("A classic example of
        # prompt injection in a web page:" and the attack quoted on its own line).
        lead_in = text[max(0, left - _LEAD_IN) : left]
        return _quoted(before, after) and (_cued(cues, lead_in) or _cued(examples, lead_in))
    if _quoted(before, after):
        return True
    if _opens_clause(text, start):
        return False  # shown bare as a clause of its own, it is an instruction to its reader
    return not (_SECOND_PERSON.search(before) or _SECOND_PERSON.search(after))


def is_quoted(text: str, start: int, end: int) -> bool:
    """The match is quoted: exactly a quotation, inside quotes opened shortly before it, or
    inside a string on its line (an odd number of double quotes or backticks before it on
    the line, one more after it: a string in code or in a JSON line)."""
    if _wrapped(text, start, end):
        return True
    line_start = text.rfind("\n", 0, start) + 1
    line_end = text.find("\n", end)
    head = text[line_start:start].replace('\\"', "")
    tail = text[end : len(text) if line_end < 0 else line_end].replace('\\"', "")
    if any(head.count(mark) % 2 and mark in tail for mark in '"`'):
        return True
    left, right = sentence_bounds(text, start, end)
    return _quoted(text[left:start], text[end:right])


def _opens_clause(text: str, start: int) -> bool:
    """Nothing but a clause break (a sentence's end, a colon, a comma, a dash, a bullet, a
    line break) comes before the match: "For example, ignore all previous instructions and
    ..." gives the order; "messages such as ignore all previous instructions" names it."""
    head = text[max(0, start - 40) : start].rstrip(" \t")
    if head.lower().endswith(_INLINE_ABBREVIATIONS):
        return False  # "e.g. ignore ..." names an example, as "such as" does
    return not head or head[-1] in _CLAUSE_BREAKS


# How far back the prose introducing a quotation is read for a cue: a sentence or two.
_LEAD_IN = 300
_CLAUSE_BREAKS = frozenset(".!?:;,\n-\u2013\u2014*>()[]")
_INLINE_ABBREVIATIONS = ("e.g.", "e.g.,", "i.e.", "i.e.,", "eg.", "viz.")


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


def _cued(cues: regex.Pattern | None, text: str) -> bool:
    """A cue occurs in `text`; the linear relaxed search rules most texts out first."""
    return cues is not None and may_occur(cues, text) and cues.search(text) is not None
