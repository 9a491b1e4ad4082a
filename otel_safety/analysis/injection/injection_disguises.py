"""Letter-level disguises undone, so that rules written against plain words still see them.

An attacker who expects a filter writes the words apart ("I n s t r u c t i o n   f o r
A I"), dotted ("a.s.s.i.s.t.a.n.t.s"), in leetspeak ("1gn0r3 4ll pr3v10us 1nstruct10ns") or
with look-alike letters of another script ("Instructions" typed with a Cyrillic I and o). Each
is undone only where it is plainly a disguise: a run of single letters, a line of several
dotted or leet words, a word that mixes Latin letters with look-alikes. Ordinary text
("e.g.", "h264", "10am", a Russian sentence) is left as it was. A disguise undone too
eagerly costs a wasted search and no more: a rule still needs its whole phrase. What a match
quotes as evidence is the text as undone, so a reviewer reads the words the disguise hid.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import regex

from otel_safety.analysis.pattern_cache import compiled

__all__ = ["undo_disguises"]

# Single characters kept one to three spaces apart, six or more in a row: "w e b i n a r".
# Inside such a run one space joins letters and two or more part words.
_SPACED_RUN = compiled(r"(?<!\S)(?:\S {1,3}){5,}\S(?!\S)")
_WORD_GAP = compiled(r" {2,}")
# Words of three or more letters written with a dot after each: "r.e.a.d.i.n.g".
_DOTTED_WORD = compiled(r"(?<![\w.])(?:[^\W\d_]\.){2,}[^\W\d_](?![^\W_])\.?")
# In a dotted line, a dot between two single letters ("t.o", "A.I").
_INNER_DOT = compiled(r"(?<=\b[^\W\d_])\.(?=[^\W\d_]\b)")
# Digits leetspeak puts for letters, between two letters: "r34d1ng", "th1s" (not "MP3", "A4"
# or "10am"); a line with three of these is leet throughout, "41" for "AI" too.
_LEET = compiled(r"[a-z][013457]+[a-z]", regex.IGNORECASE)
_LEET_DIGITS = str.maketrans("013457", "oieast")
# Cyrillic and Greek letters drawn like Latin ones, and the Latin letter each passes for.
_LOOKALIKE_CHARS = (
    "\u0430\u0435\u043e\u0440\u0441\u0443\u0445\u0456\u0458\u0455\u0501\u051b\u051d\u04bb\u04cf"
    "\u0410\u0412\u0415\u041a\u041c\u041d\u041e\u0420\u0421\u0422\u0425\u0406\u0408\u0405\u0423"
    "\u03bf\u03b1\u03b9\u03ba\u03bd\u03c1\u03c4\u03c5\u03c7"
    "\u0391\u0392\u0395\u0396\u0397\u0399\u039a\u039c\u039d\u039f\u03a1\u03a4\u03a5\u03a7"
)
_LOOKALIKE = str.maketrans(
    _LOOKALIKE_CHARS, "aeopcyxijsdqwhlABEKMHOPCTXIJSYoaiknptuxABEZHIKMNOPTYX"
)
_LOOKALIKES = compiled(f"[{_LOOKALIKE_CHARS}]")
# A word in which a Latin letter touches a letter of another script ("th\u0435"), read from
# its start up to the first such touch (lazily, so that a long word is read once).
_MIXED_WORD = compiled(
    r"(?<![^\W\d_])[^\W\d_]*?(?:[A-Za-z][^\W\d_A-Za-z]|[^\W\d_A-Za-z][A-Za-z])[^\W\d_]*"
)
# A line is read as leet or dotted when it holds at least this many such words; longer lines
# (a minified page) are left as they are, so that hostile input costs no more than plain.
_LINE_MIN = 3
_LONGEST_LINE = 4_000
_MOST_LINES = 40
# Look-alike words undone per text, at most: each costs a call, and a disguise needs few.
_MOST_MIXED_WORDS = 200


def undo_disguises(text: str) -> str:
    """`text` with spaced, dotted, leet and look-alike words written plainly (runs of
    spaces between words are kept for the caller to fold)."""
    if " " in text:
        text = _SPACED_RUN.sub(_join_spaced, text)
    if "." in text:
        text = _by_line(text, _DOTTED_WORD, lambda line: _INNER_DOT.sub("", line))
    if any(digit in text for digit in "013457"):
        text = _by_line(text, _LEET, lambda line: line.translate(_LEET_DIGITS))
    if not text.isascii() and _LOOKALIKES.search(text):
        text = _MIXED_WORD.sub(_unmixed, text, count=_MOST_MIXED_WORDS)
    return text


def _by_line(text: str, marker: regex.Pattern, undo: Callable[[str], str]) -> str:
    """Each line of at most `_LONGEST_LINE` characters in which `marker` finds `_LINE_MIN`
    disguised words, undone; the others as they were. Only the first `_MOST_LINES` lines
    with a marker are looked at, so that hostile input costs a bounded amount of work."""
    pieces, done, position = [], 0, 0
    for _ in range(_MOST_LINES):
        match = marker.search(text, position)
        if match is None:
            break
        start = text.rfind("\n", 0, match.start()) + 1
        end = text.find("\n", match.end())
        end = len(text) if end < 0 else end
        line = text[start:end]
        if len(line) <= _LONGEST_LINE and _at_least(marker, line):
            pieces += [text[done:start], undo(line)]
            done = end
        position = end + 1
    return "".join(pieces) + text[done:] if pieces else text


def _at_least(marker: regex.Pattern, line: str) -> bool:
    return sum(1 for _ in itertools.islice(marker.finditer(line), _LINE_MIN)) >= _LINE_MIN


def _join_spaced(match: regex.Match) -> str:
    return " ".join(word.replace(" ", "") for word in _WORD_GAP.split(match.group()))


def _unmixed(match: regex.Match) -> str:
    """A word of Latin letters and look-alikes, in Latin letters."""
    return match.group().translate(_LOOKALIKE)
