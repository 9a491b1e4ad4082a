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
also lets "ß" match "ss". The two agree on texts without such a character, so a family
holding such a pattern rules out only those (`case_folds`, `prefilter.RelaxedFamily`).

`relax` returns None for syntax it does not know how to relax (a verbose pattern, fuzzy
matching, a property RE2 lacks): such a family is simply not prefiltered. It reads the
pattern through `regex_tokens`, as `re2_syntax` does.
"""

from __future__ import annotations

import regex

from otel_safety.analysis import pattern_cache, regex_tokens
from otel_safety.analysis.regex_tokens import (
    ANCHOR,
    ATOMIC,
    BRACE,
    CLASS,
    COMMENT,
    COUNT,
    ESCAPE,
    FLAGS,
    FUZZY,
    GROUP,
    ITEM_BRACKET,
    ITEM_END,
    ITEM_ESCAPE,
    ITEM_SET_OPERATION,
    LOOKAROUND,
    NAMED,
    NAMED_REFERENCE,
    PLAIN,
    QUANTIFIER,
    Lexer,
    Token,
    group_end,
)

__all__ = ["relax"]

# Shorthand classes whose RE2 meaning is ASCII-only; their Unicode forms (as class items).
_UNICODE_ITEMS = {
    "w": r"\p{L}\p{M}\p{N}\p{Pc}",
    "d": r"\p{Nd}",
    "s": r"\t\n\x0b\f\r\x{1c}-\x{20}\x{85}\x{a0}\p{Z}",
}
# The same shorthands where a match may take more (outside a class, or in one that is not
# negated): exact on ASCII, and every character beyond it. RE2 compiles such a class to a
# few byte ranges, where the Unicode tables cost it most of the time a family takes to
# compile (and a family is compiled by every judging process on its first search); the
# family only rules out fewer texts that are not ASCII.
_WIDE_ITEMS = {
    "w": r"0-9A-Z_a-z\x{80}-\x{10FFFF}",
    "d": r"0-9\x{80}-\x{10FFFF}",
    "s": r"\t\n\x0b\f\r\x{1c}-\x{20}\x{80}-\x{10FFFF}",
}
_ANY_TEXT = r"(?s:.*)"
_RE2_FLAGS = frozenset("imsU")
_SCOPED_LINES = pattern_cache.compiled(r"\(\?[a-zA-Z]*m")
_ZERO_WIDTH = frozenset("bBAZzG")
# Counted repetitions above this are cut to it (`{44}` reads `{16,}`, `{0,200}` reads `*`):
# the relaxed form only has to match more, and a long count makes RE2's automaton large
# and slow; keeping the first 16 still rules out texts with no such run at all.
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
    return pattern_cache.remembered(
        "relax",
        (source, int(flags), keep_anchors),
        lambda: _relax(source, flags, keep_anchors),
        (__name__, regex_tokens.__name__),
    )


def _relax(source: str, flags: int, keep_anchors: bool) -> str | None:
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
    """Writes the relaxed form token by token (see `regex_tokens`)."""

    def __init__(
        self, source: str, keep_anchors: bool = False, lines: bool = False, sets: bool = False
    ) -> None:
        self.source = source
        # sets: VERSION1, where classes may nest and combine (`[[a-z]--[aeiou]]`)
        self.lexer = Lexer(source, sets)
        self.keep_anchors = keep_anchors
        self.lines = lines
        self.out: list[str] = []
        self.after_quantifier = False

    def pattern(self) -> str:
        while self.lexer.more():
            self._token(self.lexer.next())
        return "".join(self.out)

    def _emit(self, text: str, quantifier: bool = False) -> None:
        self.out.append(text)
        self.after_quantifier = quantifier

    def _token(self, token: Token) -> None:
        kind = token.kind
        if kind == ESCAPE:
            self._escape(token)
        elif kind == CLASS:
            self._class(token)
        elif kind == GROUP:
            self._group(token)
        elif kind == ANCHOR:
            if not self.keep_anchors:
                return  # anchors only restrict
            if token.char == "$" and not self.lines:
                self._emit(r"(?:\n?\z)")  # `regex` also matches before a final line break
            else:
                self._emit(token.char)
        elif kind == QUANTIFIER:
            self._simple_quantifier(token.char)
        elif kind == COUNT:
            self._counted(token)
        elif kind == FUZZY:
            raise _Unrelaxable("fuzzy matching")
        elif kind == BRACE:
            self._emit(r"\{")
        else:  # a literal character, `)`, `|` or `.`
            self._emit(token.char)

    def _simple_quantifier(self, char: str) -> None:
        if char == "+" and self.after_quantifier:
            self.after_quantifier = False  # possessive: the plain form matches more
            return
        if char == "?" and self.after_quantifier:
            self._emit("?")  # lazy
            self.after_quantifier = False
            return
        self._emit(char, quantifier=True)

    def _counted(self, token: Token) -> None:
        low, comma, high = token.argument
        if not (low or comma or high):
            self._emit(r"\{\}")  # `regex` reads an empty count as text
        elif max(int(low or 0), int(high or 0)) > _MAX_COUNT or not (low or high):
            least = min(int(low or 0), _MAX_COUNT)  # what every match still holds
            self._emit({0: "*", 1: "+"}.get(least, f"{{{least},}}"), quantifier=True)
        else:  # written out in full: RE2 reads `{,n}` as text where `regex` means {0,n}
            self._emit("{" + (low or "0") + comma + high + "}", quantifier=True)

    def _escape(self, token: Token) -> None:
        char = token.char
        if char in _ZERO_WIDTH:
            return
        if char in _WIDE_ITEMS:
            self._emit(f"[{_WIDE_ITEMS[char]}]")
        elif char.isdigit() and char != "0":
            self._emit(_ANY_TEXT)  # a backreference can be any text
        else:
            self._emit(_plain_escape(char, token.argument))

    def _class(self, token: Token) -> None:
        """A character class, copied item by item with escapes made RE2-safe. A negated
        class that holds an upper-case class escape (blanks but a line break, word
        characters but the underscore) becomes the Unicode class that escape leaves out:
        RE2 reads those escapes as ASCII, so copied into a negated class they would leave
        out the letters and spaces of other scripts that `regex` lets in (a no-break space
        before a list's dash), and the relaxed form must match wherever the pattern can."""
        if token.argument:
            upper = next(
                (i.char for i in token.items if i.kind == ITEM_ESCAPE and i.char in "WDS"), None
            )
            if upper is not None:
                self._emit(f"[{_WIDE_ITEMS[upper.lower()]}]")
                return
        parts = ["[^" if token.argument else "["]
        for item in token.items:
            if item.kind == ITEM_ESCAPE:
                escaped = item.char
                if escaped in _UNICODE_ITEMS:  # negated: the exact one, or it would leave out more
                    parts.append((_UNICODE_ITEMS if token.argument else _WIDE_ITEMS)[escaped])
                elif escaped == "b":
                    parts.append(r"\x08")
                elif escaped in "AZzGB" or (escaped.isdigit() and escaped != "0"):
                    raise _Unrelaxable("escape in class")
                else:
                    parts.append(_plain_escape(escaped, item.argument))
            elif item.kind == ITEM_BRACKET:
                if self.lexer.sets:
                    raise _Unrelaxable("nested set")
                parts.append(r"\[")
            elif item.kind == ITEM_SET_OPERATION:
                raise _Unrelaxable("set operation")
            elif item.kind == ITEM_END:
                raise IndexError("class never closes")
            else:
                parts.append(item.char)
        parts.append("]")
        self._emit("".join(parts))

    def _group(self, token: Token) -> None:
        opener = token.char
        if opener == LOOKAROUND:
            end = group_end(self.source, token.start)  # a lookaround only restricts
            if end is None:
                raise IndexError("group never closes")
            self.lexer.at = end
            self._emit("")
        elif opener == COMMENT:
            return
        elif opener == NAMED_REFERENCE:
            if token.end < 0:
                raise ValueError("named reference never closes")
            self._emit(_ANY_TEXT)
        elif opener in (ATOMIC, NAMED, PLAIN):
            self._emit("(?:")  # names would clash in a family's alternation; capture nothing
        elif opener == FLAGS:
            on, off, _, text = token.argument
            if not set(on) | set(off) <= _RE2_FLAGS:
                raise _Unrelaxable(f"inline flags {text}")
            self._emit(text)
        else:
            raise _Unrelaxable(f"group {self.source[token.start : token.start + 4]}")


def _plain_escape(char: str, argument: str | None) -> str:
    """An escape that means one character or a class RE2 reads alike (or as a superset);
    `argument`: what the lexer read after it."""
    if char in "uU":
        if argument is None:
            raise _Unrelaxable("bad \\u escape")
        return f"\\x{{{argument}}}"
    if char == "N":
        raise _Unrelaxable("named character")
    if char in "pP":
        if argument is None:
            raise _Unrelaxable("bad property")
        return f"\\{char}{argument}"
    if char == "x":
        if argument is None:
            raise _Unrelaxable("bad \\x escape")
        return f"\\x{argument}"
    if char == "0":
        return f"\\x{{{int('0' + argument, 8):x}}}"
    if char.isalnum() and char not in "tnrfvaWSD":
        raise _Unrelaxable(f"escape \\{char}")
    if char == "v":
        return r"\x0b"
    if char == "a":
        return r"\x07"
    return "\\" + char
