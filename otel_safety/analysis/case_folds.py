"""When RE2's case folding sees every match a full-case `regex` pattern can make.

RE2 folds case one character at a time (Unicode's simple folding, which already takes the
Kelvin sign for "k" and the long s for "s"). A FULLCASE `regex` pattern (VERSION1 with
IGNORECASE) also folds one character into several: "ß" matches "ss", "ﬁ" matches "fi". The
two can only disagree where the text or the pattern holds such a character, one whose full
fold (or upper or lower case) is longer than itself; 104 of them, Greek and Latin, none
common. A relaxed RE2 search that finds nothing in a text without one proves a full-case
pattern finds nothing there too, so texts with curly quotes, accents or Cyrillic are ruled
out as ASCII texts are, not searched pattern by pattern.
"""

from __future__ import annotations

import unicodedata

from otel_safety.analysis.memo import content_memo
from otel_safety.analysis.pattern_cache import compiled

try:
    import re2
except ImportError:  # `regex` reads the text instead: slower, the same answer
    re2 = None

__all__ = ["WIDE_FOLDS", "folds_wide", "source_folds_wide"]

# Every character whose case fold, upper or lower case is two or more characters
# (tests/test_case_folds.py works it out from Python's Unicode tables and compares).
WIDE_FOLDS = (
    "\u00df\u0130\u0149\u01f0\u0390\u03b0\u0587\u1e96-\u1e9a\u1e9e\u1f50\u1f52\u1f54\u1f56"
    "\u1f80-\u1faf\u1fb2-\u1fb4\u1fb6\u1fb7\u1fbc\u1fc2-\u1fc4\u1fc6\u1fc7\u1fcc\u1fd2"
    "\u1fd3\u1fd6\u1fd7\u1fe2-\u1fe4\u1fe6\u1fe7\u1ff2-\u1ff4\u1ff6\u1ff7\u1ffc\ufb00-\ufb06"
    "\ufb13-\ufb17"
)
_WIDE_FOLD = compiled(f"[{WIDE_FOLDS}]")
# RE2 reads a long text beyond ASCII ten times faster than `regex` (UTF-8, no fold at all).
_WIDE_FOLD_RE2 = None if re2 is None else re2.compile(f"[{WIDE_FOLDS}]")
# How a pattern may write a character by its code or name: \xdf, \x{df}, \u00df, \N{...},
# \337.
_ESCAPED_CHARACTER = compiled(
    r"\\(?:x[0-9A-Fa-f]{2}|x\{[0-9A-Fa-f]{1,8}\}|u[0-9A-Fa-f]{4}|U[0-9A-Fa-f]{8}"
    r"|N\{[^}]{1,80}\}|[0-3][0-7]{2})"
)


@content_memo
def folds_wide(text: str) -> bool:
    """Whether `text` holds a character that a full case fold widens (never an ASCII text)."""
    if text.isascii():
        return False
    if _WIDE_FOLD_RE2 is None:
        return _WIDE_FOLD.search(text) is not None
    return _WIDE_FOLD_RE2.search(text.encode("utf-8", "replace")) is not None


def source_folds_wide(source: str) -> bool:
    """Whether a pattern's source names such a character, literally or by an escape: a
    full-case pattern that does matches texts RE2 reads otherwise, ASCII ones included
    ("straße" matches "STRASSE")."""
    if folds_wide(source):
        return True
    for escape in _ESCAPED_CHARACTER.finditer(source):
        try:
            character = _unescape(escape.group())
        except (ValueError, KeyError):
            return True  # unreadable: assume the worst
        if folds_wide(character):
            return True
    return False


def _unescape(escape: str) -> str:
    kind, body = escape[1], escape[2:].strip("{}")
    if kind == "N":
        return unicodedata.lookup(body)
    if kind.isdigit():
        return chr(int(escape[1:], 8))
    return chr(int(body, 16))
