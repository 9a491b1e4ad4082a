"""A detector pattern rewritten for RE2 so that it matches at least wherever the original does.

Detector patterns are written for the `regex` module (lookarounds, possessive quantifiers,
Unicode classes), whose backtracking makes a search of a long text slow and, for some
patterns, quadratic. RE2 searches in linear time, many times faster, but knows less syntax.
So each pattern gets a relaxed RE2 form: every assertion that only restricts where a match
may be (anchors, word boundaries, lookarounds) is dropped, backreferences become "any
text", possessive and atomic forms become plain ones, and the ASCII-only shorthand classes
become their Unicode equivalents. The relaxed form matches a superset of the original's
matches, so "the relaxed family finds nothing" proves that the original finds nothing
either; only texts that pass are searched by the original patterns.

RE2 folds case one character at a time; a FULLCASE pattern (VERSION1 with IGNORECASE sets it)
also lets "ß" match "ss". On ASCII text the two agree, so a family holding such a pattern
only rules out ASCII texts (`prefilter.RelaxedFamily.ascii_only`).

`relax` returns None for syntax it does not know how to relax (a verbose pattern, fuzzy
matching, a property RE2 lacks): such a family is simply not prefiltered.
"""

from __future__ import annotations

import regex

__all__ = ["relax"]

# Shorthand classes whose RE2 meaning is ASCII-only; their Unicode forms (as class items).
_UNICODE_ITEMS = {
    "w": r"\p{L}\p{M}\p{N}\p{Pc}",
    "d": r"\p{Nd}",
    "s": r"\t\n\x0b\f\r\x{1c}-\x{20}\x{85}\x{a0}\p{Z}",
}
_ANY_TEXT = r"(?s:.*)"
_RE2_FLAGS = frozenset("imsU")
_SCOPED_LINES = regex.compile(r"\(\?[a-zA-Z]*m")
_ZERO_WIDTH = frozenset("bBAZzG")
# Counted repetitions above this become * or +: the relaxed form only has to match more,
# and a long count (`\w{0,200}`) makes RE2's automaton large and slow.
_MAX_COUNT = 16


class _Unrelaxable(ValueError):
    """The pattern uses syntax with no relaxed RE2 form here."""


def relax(source: str, flags: int = 0, *, keep_anchors: bool = False) -> str | None:
    """The relaxed RE2 source of a `regex` pattern, or None when it cannot be relaxed.

    `keep_anchors` keeps `^` and `$` (string start and end, or line start and end under
    MULTILINE, as in RE2): right when the pattern is run on the same whole text the
    prefilter reads, not on parts of it (sentences).
    """
    if flags & (regex.VERBOSE | regex.BESTMATCH | regex.ENHANCEMATCH):
        return None
    if keep_anchors and _SCOPED_LINES.search(source):
        keep_anchors = False  # a `(?m:...)` scope: simpler to drop its anchors
    try:
        lines = bool(flags & regex.MULTILINE)
        relaxer = _Relaxer(source, keep_anchors, lines, bool(flags & regex.VERSION1))
        relaxed = relaxer.pattern()
    except (_Unrelaxable, IndexError):
        return None
    return f"(?m:{relaxed})" if keep_anchors and flags & regex.MULTILINE else relaxed


class _Relaxer:
    def __init__(
        self, source: str, keep_anchors: bool = False, lines: bool = False, sets: bool = False
    ) -> None:
        self.source = source
        self.keep_anchors = keep_anchors
        self.lines = lines
        self.sets = sets  # VERSION1: classes may nest and combine (`[[a-z]--[aeiou]]`)
        self.at = 0
        self.out: list[str] = []
        self.after_quantifier = False

    def pattern(self) -> str:
        while self.at < len(self.source):
            self._token()
        return "".join(self.out)

    def _emit(self, text: str, quantifier: bool = False) -> None:
        self.out.append(text)
        self.after_quantifier = quantifier

    def _token(self) -> None:
        char = self.source[self.at]
        if char == "\\":
            self._escape()
        elif char == "[":
            self._class()
        elif char == "(":
            self._group()
        elif char in "^$":
            self.at += 1
            if not self.keep_anchors:
                return  # anchors only restrict
            if char == "$" and not self.lines:
                self._emit(r"(?:\n?\z)")  # `regex` also matches before a final line break
            else:
                self._emit(char)
        elif char in "*+?":
            self._simple_quantifier(char)
        elif char == "{":
            self._counted()
        else:
            self.at += 1
            self._emit(char)

    def _simple_quantifier(self, char: str) -> None:
        self.at += 1
        if char == "+" and self.after_quantifier:
            self.after_quantifier = False  # possessive: the plain form matches more
            return
        if char == "?" and self.after_quantifier:
            self._emit("?")  # lazy
            self.after_quantifier = False
            return
        self._emit(char, quantifier=True)

    def _counted(self) -> None:
        found = regex.match(r"\{(\d*)(,?)(\d*)\}", self.source[self.at :])
        if found is None:
            if regex.match(r"\{\s*[eisd]", self.source[self.at :]):
                raise _Unrelaxable("fuzzy matching")
            self.at += 1
            self._emit(r"\{")
            return
        self.at += found.end()
        low, _, high = found.groups()
        if max(int(low or 0), int(high or 0)) > _MAX_COUNT:
            self._emit("*" if int(low or 0) == 0 else "+", quantifier=True)
        else:
            self._emit(found.group(0), quantifier=True)

    def _escape(self) -> None:
        char = self.source[self.at + 1]
        self.at += 2
        if char in _ZERO_WIDTH:
            return
        if char in _UNICODE_ITEMS:
            self._emit(f"[{_UNICODE_ITEMS[char]}]")
        elif char.isdigit() and char != "0":
            while self.at < len(self.source) and self.source[self.at].isdigit():
                self.at += 1
            self._emit(_ANY_TEXT)  # a backreference can be any text
        else:
            self._emit(self._plain_escape(char))

    def _plain_escape(self, char: str) -> str:
        """An escape that means one character or a class RE2 reads alike (or as a superset)."""
        if char in "uU":
            width = 4 if char == "u" else 8
            digits = self.source[self.at : self.at + width]
            if len(digits) != width or not all(d in "0123456789abcdefABCDEF" for d in digits):
                raise _Unrelaxable("bad \\u escape")
            self.at += width
            return f"\\x{{{digits}}}"
        if char == "N":
            raise _Unrelaxable("named character")
        if char in "pP":
            found = regex.match(r"\{[^}]*\}|[A-Za-z]", self.source[self.at :])
            if found is None:
                raise _Unrelaxable("bad property")
            self.at += found.end()
            return f"\\{char}{found.group(0)}"
        if char == "x":
            found = regex.match(r"\{[0-9a-fA-F]+\}|[0-9a-fA-F]{2}", self.source[self.at :])
            if found is None:
                raise _Unrelaxable("bad \\x escape")
            self.at += found.end()
            return f"\\x{found.group(0)}"
        if char == "0":
            digits = regex.match(r"[0-7]{0,2}", self.source[self.at :]).group(0)
            self.at += len(digits)
            return f"\\x{{{int('0' + digits, 8):x}}}"
        if char.isalnum() and char not in "tnrfvaWSD":
            raise _Unrelaxable(f"escape \\{char}")
        if char == "v":
            return r"\x0b"
        if char == "a":
            return r"\x07"
        return "\\" + char

    def _class(self) -> None:
        """A character class, copied item by item with escapes made RE2-safe."""
        self.at += 1
        parts = ["["]
        if self.source[self.at] == "^":
            parts.append("^")
            self.at += 1
        first = True
        while True:
            char = self.source[self.at]
            if char == "]" and not first:
                self.at += 1
                break
            first = False
            if char == "\\":
                escaped = self.source[self.at + 1]
                self.at += 2
                if escaped in _UNICODE_ITEMS:
                    parts.append(_UNICODE_ITEMS[escaped])
                elif escaped == "b":
                    parts.append(r"\x08")
                elif escaped in "AZzGB" or (escaped.isdigit() and escaped != "0"):
                    raise _Unrelaxable("escape in class")
                else:
                    parts.append(self._plain_escape(escaped))
            elif char == "[":
                if self.sets:
                    raise _Unrelaxable("nested set")
                self.at += 1
                parts.append(r"\[")
            elif self.sets and self.source[self.at : self.at + 2] in ("&&", "--", "||", "~~"):
                raise _Unrelaxable("set operation")
            else:
                self.at += 1
                parts.append(char)
        parts.append("]")
        self._emit("".join(parts))

    def _group(self) -> None:
        rest = self.source[self.at :]
        if rest.startswith(("(?=", "(?!", "(?<=", "(?<!")):
            self._skip_group()  # a lookaround only restricts
            self._emit("")
            return
        if rest.startswith("(?#"):
            self.at = self.source.index(")", self.at) + 1
            return
        if rest.startswith("(?P="):
            self.at = self.source.index(")", self.at) + 1
            self._emit(_ANY_TEXT)
            return
        if rest.startswith("(?>"):
            self.at += 3
            self._emit("(?:")
            return
        named = regex.match(r"\(\?P?<(\w+)>", rest)
        if named:
            self.at += named.end()
            self._emit("(?:")  # names would clash in a family's alternation
            return
        flags = regex.match(r"\(\?([a-zA-Z]*)(?:-([a-zA-Z]*))?(:|\))", rest)
        if flags:
            used = set(flags.group(1) or "") | set(flags.group(2) or "")
            if not used <= _RE2_FLAGS:
                raise _Unrelaxable(f"inline flags {flags.group(0)}")
            self.at += flags.end()
            self._emit(flags.group(0))
            return
        if rest.startswith("(?"):
            raise _Unrelaxable(f"group {rest[:4]}")
        self.at += 1
        self._emit("(?:")  # capture nothing: the prefilter only asks whether

    def _skip_group(self) -> None:
        """Move past a group and everything nested in it."""
        depth = 0
        while True:
            char = self.source[self.at]
            if char == "\\":
                self.at += 2
                continue
            if char == "[":
                self._skip_class()
                continue
            self.at += 1
            if char == "(":
                depth += 1
            elif char == ")":
                depth -= 1
                if depth == 0:
                    return

    def _skip_class(self) -> None:
        self.at += 1
        if self.source[self.at] == "^":
            self.at += 1
        first = True
        while True:
            char = self.source[self.at]
            if char == "\\":
                self.at += 2
            elif char == "]" and not first:
                self.at += 1
                return
            else:
                self.at += 1
            first = False
