"""The syntax of a `regex` pattern read one token at a time, for the RE2 rewrites.

Two rewrites read detector patterns: `re2_syntax` (an RE2 form that finds exactly what
`regex` finds on ASCII text) and `relax` (an RE2 form that matches at least wherever the
pattern does). They read the same syntax and differ only in what they write, so the reading
lives here once: `Lexer` yields escapes with their arguments (`\\x41`, `\\p{L}`,
backreference digits), whole character classes item by item, group openers by kind, counts
and the one-character tokens. Each rewrite decides what a token means to it and may move
the lexer past text it does not read token by token (a lookaround it drops, a word
lookaround it rewrites whole).

Malformed text raises where reading it fails, as a walker reading character by character
would: IndexError past the end of the source, ValueError for a comment or named
reference that never closes; a class that never closes ends with an `END` item, so that a
rewrite refusing an item before it says why.
"""

from __future__ import annotations

from typing import NamedTuple

from otel_safety.analysis.pattern_cache import compiled

__all__ = [
    "ALTERNATION",
    "ANCHOR",
    "BRACE",
    "CHAR",
    "CLASS",
    "CLOSE",
    "COUNT",
    "DOT",
    "ESCAPE",
    "FUZZY",
    "GROUP",
    "QUANTIFIER",
    "ClassItem",
    "Lexer",
    "Token",
    "class_end",
    "group_end",
]

# Token kinds
ESCAPE = "escape"  # char: the escaped character; argument: see `_escape_argument`
CLASS = "class"  # negated; items: the class's `ClassItem`s
GROUP = "group"  # char: the opener's kind (below); argument: its parts
CLOSE = "close"
ANCHOR = "anchor"  # char: ^ or $
QUANTIFIER = "quantifier"  # char: *, + or ?
COUNT = "count"  # argument: (low, comma, high) as written
BRACE = "brace"  # a `{` that opens no count: a literal
FUZZY = "fuzzy"  # a `{` opening fuzzy-matching constraints
ALTERNATION = "alternation"
DOT = "dot"
CHAR = "char"  # char: a run of literal characters (a quantifier after it takes the last)

# Group opener kinds (Token.char of a GROUP)
COMMENT = "comment"  # (?#...), whole
LOOKAROUND = "lookaround"  # argument: the opener, (?= (?! (?<= or (?<!
NAMED_REFERENCE = "named_reference"  # (?P=name), whole (end -1 when it never closes)
ATOMIC = "atomic"  # (?>
NAMED = "named"  # argument: the name, as `\w+` reads it
FLAGS = "flags"  # argument: (on, off, ":" or ")", the opener's text)
OTHER = "other"  # another (?...: the rewrites refuse it
PLAIN = "plain"  # (

# Class item kinds (ClassItem.kind)
ITEM_ESCAPE = "escape"  # char, argument as for ESCAPE
ITEM_BRACKET = "bracket"  # a `[` inside a class; argument: True when it opens [:...:]
ITEM_SET_OPERATION = "set_operation"  # &&, --, || or ~~ in a VERSION1 class
ITEM_DASH = "dash"
ITEM_CHAR = "char"
ITEM_END = "end"  # the source ended inside the class

_COUNT = compiled(r"\{(\d*)(,?)(\d*)\}")
_FUZZY = compiled(r"\{\s*[eisd]")
_NAMED = compiled(r"\(\?P?<(\w+)>")
_FLAGS = compiled(r"\(\?([a-zA-Z]*)(?:-([a-zA-Z]*))?(:|\))")
_HEX = compiled(r"\{[0-9a-fA-F]+\}|[0-9a-fA-F]{2}")
_OCTAL = compiled(r"[0-7]{0,2}")
_PROPERTY = compiled(r"\{[^}]*\}|[A-Za-z]")
_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")
_LOOKAROUNDS = ("(?<=", "(?<!", "(?=", "(?!")
_SET_OPERATIONS = frozenset(("&&", "--", "||", "~~"))
_LITERALS = compiled(r"[^\\\[(){*+?|.^$]+")
_SINGLE = {")": CLOSE, "|": ALTERNATION, ".": DOT, "^": ANCHOR, "$": ANCHOR}


class ClassItem(NamedTuple):
    kind: str
    char: str = ""
    argument: object = None


class Token(NamedTuple):
    """One token: `start` and `end` are its span in the source."""

    kind: str
    start: int
    end: int
    char: str = ""
    argument: object = None
    items: tuple[ClassItem, ...] = ()


class Lexer:
    """Reads `source` from `at`; `sets`: VERSION1, where classes may nest and combine."""

    def __init__(self, source: str, sets: bool = False) -> None:
        self.source = source
        self.sets = sets
        self.at = 0

    def more(self) -> bool:
        return self.at < len(self.source)

    def next(self) -> Token:
        """The token at `at`, moving past it."""
        source, start = self.source, self.at
        char = source[start]
        if char == "\\":
            escaped = source[start + 1]
            self.at = start + 2
            argument = self._escape_argument(escaped)
            return Token(ESCAPE, start, self.at, escaped, argument)
        if char == "[":
            negated, items = self._class()
            return Token(CLASS, start, self.at, "", negated, items)
        if char == "(":
            return self._group()
        if char in "*+?":
            self.at = start + 1
            return Token(QUANTIFIER, start, self.at, char)
        if char == "{":
            found = _COUNT.match(source, start)
            if found is not None:
                self.at = found.end()
                return Token(COUNT, start, self.at, "", found.groups())
            self.at = start + 1
            return Token(FUZZY if _FUZZY.match(source, start) else BRACE, start, self.at)
        if char in _SINGLE:
            self.at = start + 1
            return Token(_SINGLE[char], start, self.at, char)
        self.at = _LITERALS.match(source, start).end()
        return Token(CHAR, start, self.at, source[start : self.at])

    def _escape_argument(self, escaped: str) -> str | None:
        """What follows an escape letter and belongs to it, moving past it: the digits of
        `\\u`/`\\U` (None unless all four or eight are hex), of `\\x` (`{...}` or two; None
        when neither), of `\\0` (up to two octal), the name of `\\p`/`\\P` (`{...}` or one
        letter; None when neither) and the digits after a backreference's first."""
        source, at = self.source, self.at
        if escaped in "uU":
            width = 4 if escaped == "u" else 8
            digits = source[at : at + width]
            if len(digits) != width or not all(d in _HEX_DIGITS for d in digits):
                return None
            self.at = at + width
            return digits
        if escaped == "x":
            found = _HEX.match(source, at)
        elif escaped == "0":
            found = _OCTAL.match(source, at)
        elif escaped in "pP":
            found = _PROPERTY.match(source, at)
        elif escaped.isdigit():
            end = at
            while end < len(source) and source[end].isdigit():
                end += 1
            self.at = end
            return source[at:end]
        else:
            return None
        if found is None:
            return None
        self.at = found.end()
        return found.group(0)

    def _class(self) -> tuple[bool, tuple[ClassItem, ...]]:
        source = self.source
        self.at += 1
        negated = source[self.at] == "^"
        if negated:
            self.at += 1
        items: list[ClassItem] = []
        first = True
        while True:
            if self.at >= len(source):
                items.append(ClassItem(ITEM_END))
                return negated, tuple(items)
            char = source[self.at]
            if char == "]" and not first:
                self.at += 1
                return negated, tuple(items)
            first = False
            if char == "\\":
                if self.at + 1 >= len(source):
                    items.append(ClassItem(ITEM_END))
                    return negated, tuple(items)
                escaped = source[self.at + 1]
                self.at += 2
                items.append(ClassItem(ITEM_ESCAPE, escaped, self._escape_argument(escaped)))
            elif char == "[":
                items.append(ClassItem(ITEM_BRACKET, "[", source.startswith("[:", self.at)))
                self.at += 1
            elif self.sets and source[self.at : self.at + 2] in _SET_OPERATIONS:
                items.append(ClassItem(ITEM_SET_OPERATION, source[self.at : self.at + 2]))
                self.at += 2
            elif char == "-":
                items.append(ClassItem(ITEM_DASH, "-"))
                self.at += 1
            else:
                items.append(ClassItem(ITEM_CHAR, char))
                self.at += 1

    def _group(self) -> Token:
        source, start = self.source, self.at
        if source.startswith("(?#", start):
            self.at = source.index(")", start) + 1
            return Token(GROUP, start, self.at, COMMENT)
        for opener in _LOOKAROUNDS:
            if source.startswith(opener, start):
                self.at = start + len(opener)
                return Token(GROUP, start, self.at, LOOKAROUND, opener)
        if source.startswith("(?P=", start):
            close = source.find(")", start)
            self.at = len(source) if close < 0 else close + 1
            return Token(GROUP, start, -1 if close < 0 else self.at, NAMED_REFERENCE)
        if source.startswith("(?>", start):
            self.at = start + 3
            return Token(GROUP, start, self.at, ATOMIC)
        named = _NAMED.match(source, start)
        if named:
            self.at = named.end()
            return Token(GROUP, start, self.at, NAMED, named.group(1))
        flags = _FLAGS.match(source, start)
        if flags:
            self.at = flags.end()
            on, off, end = flags.group(1) or "", flags.group(2) or "", flags.group(3)
            return Token(GROUP, start, self.at, FLAGS, (on, off, end, flags.group(0)))
        if source.startswith("(?", start):
            self.at = start + 2
            return Token(GROUP, start, self.at, OTHER)
        self.at = start + 1
        return Token(GROUP, start, self.at, PLAIN)


def group_end(source: str, at: int) -> int | None:
    """Where the group opening at `at` ends (after its `)`), nested groups and classes
    included; None when the source ends first."""
    depth = 0
    while at < len(source):
        char = source[at]
        if char == "\\":
            at += 2
            continue
        if char == "[":
            at = class_end(source, at)
            continue
        at += 1
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth == 0:
                return at
    return None


def class_end(source: str, at: int) -> int:
    """Where the class opening at `at` ends (after its `]`); IndexError when it never does."""
    at += 1
    if source[at] == "^":
        at += 1
    first = True
    while True:
        char = source[at]
        if char == "\\":
            at += 2
        elif char == "]" and not first:
            return at + 1
        else:
            at += 1
        first = False
