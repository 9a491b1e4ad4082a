"""Letter-level disguises undone, so that rules written against plain words still see them.

An attacker who expects a filter writes the words apart ("I n s t r u c t i o n   f o r
A I"), dotted ("a.s.s.i.s.t.a.n.t.s"), in leetspeak ("1gn0r3 4ll pr3v10us 1nstruct10ns") or
with look-alike letters of another script ("Instructions" typed with a Cyrillic I and o). Each
is undone only where it is plainly a disguise: a run of single letters, a line of several
dotted or leet words, a word that mixes Latin letters with look-alikes. Ordinary text
("e.g.", "h264", "10am", a Russian sentence) is left as it was. The result is only ever
searched, never shown, so a disguise undone too eagerly costs nothing but a wasted search.
"""

from __future__ import annotations

import regex

from otel_safety.analysis.pattern_cache import compiled

__all__ = ["undo_disguises"]

# Single characters kept one to three spaces apart, six or more in a row: "w e b i n a r".
# Inside such a run one space joins letters and two or more part words.
_SPACED_RUN = compiled(r"(?<!\S)(?:\S {1,3}){5,}\S(?!\S)")
_WORD_GAP = compiled(r" {2,}")
# Words of three or more letters written with a dot after each: "r.e.a.d.i.n.g".
_DOTTED_WORD = compiled(r"(?<![\w.])(?:[^\W\d_]\.){2,}[^\W\d_](?![^\W_])\.?")
_DOTTED_ANY = compiled(r"(?<![\w.])(?:[^\W\d_]\.)+[^\W\d_](?![^\W_])\.?")
# A word with the digits leetspeak puts for letters between two letters: "r34d1ng", "th1s"
# (not "MP3", "A4" or "10am"); a line of three such is leet throughout, "41" for "AI" too.
_LEET_WORD = compiled(r"\b[a-z0-9]*[a-z][013457]+[a-z][a-z0-9]*\b", regex.IGNORECASE)
_LEET_TOKEN = compiled(r"\b[a-z0-9]*[013457][a-z0-9]*\b", regex.IGNORECASE)
_LEET = str.maketrans("013457", "oieast")
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
_LETTERS = compiled(r"[^\W\d_]+")
_LATIN = compiled(r"[A-Za-z]")
# A line is read as leet or dotted when it holds at least this many such words.
_LINE_MIN = 3


def undo_disguises(text: str) -> str:
    """`text` with spaced, dotted, leet and look-alike words written plainly (runs of
    spaces between words are kept for the caller to fold)."""
    if "  " in text or " " in text:
        text = _SPACED_RUN.sub(_join_spaced, text)
    if "." in text and len(_DOTTED_WORD.findall(text)) >= _LINE_MIN:
        text = _by_line(text, _DOTTED_WORD, lambda line: _DOTTED_ANY.sub(_undotted, line))
    if len(_LEET_WORD.findall(text)) >= _LINE_MIN:
        text = _by_line(text, _LEET_WORD, lambda line: _LEET_TOKEN.sub(_unleet, line))
    if not text.isascii() and _LOOKALIKES.search(text):
        text = _LETTERS.sub(_unmixed, text)
    return text


def _by_line(text: str, marker, undo) -> str:
    """Each line that holds `_LINE_MIN` words `marker` finds, undone; the others as they were."""
    lines = text.split("\n")
    for number, line in enumerate(lines):
        if len(marker.findall(line)) >= _LINE_MIN:
            lines[number] = undo(line)
    return "\n".join(lines)


def _join_spaced(match) -> str:
    return " ".join(word.replace(" ", "") for word in _WORD_GAP.split(match.group()))


def _undotted(match) -> str:
    return match.group().replace(".", "")


def _unleet(match) -> str:
    return match.group().translate(_LEET)


def _unmixed(match) -> str:
    """A word of Latin letters and look-alikes, in Latin letters; any other word as it was."""
    word = match.group()
    if word.isascii() or not (_LATIN.search(word) and _LOOKALIKES.search(word)):
        return word
    return word.translate(_LOOKALIKE)
