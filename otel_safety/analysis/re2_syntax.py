"""A `regex` pattern rewritten for RE2 so that both find the same matches on ASCII text.

Detector patterns are written for the `regex` module, whose backtracking makes some of them
quadratic on hostile text (`[\\w./-]+\\.py\\b` on a megabyte of dots). RE2 runs in linear time
but reads a smaller language, and some shared syntax means something else there:

- `\\w`, `\\d`, `\\s` are Unicode in `regex`, ASCII in RE2; `\\b` is a boundary between
  Unicode word characters in `regex`, ASCII ones in RE2. On ASCII text the two agree once
  `\\s` is spelt out (`regex` counts the vertical tab, RE2 does not), so the rewrite is exact
  for ASCII text only; `linear.LinearPattern` runs other text on `regex`.
- `$` without MULTILINE also matches before a final line break in `regex`; it becomes `\\z`
  and `dollar_at_end` tells the caller to leave text ending in a line break to `regex`.
- VERSION1 with IGNORECASE folds case fully (`ß` matches `ss`); on ASCII text that differs
  from RE2's simple folding only when the pattern names a character beyond ASCII.
- A lookaround of one word character next to a piece whose edge is always (or never) a word
  character is a word boundary (`(?:ran|run)(?!\\w)` is `(?:ran|run)\\b`, see `word_edges`);
  any other lookaround has no RE2 form.
- A global inline flag (`(?i)`) applies to the whole pattern in `regex` wherever it stands,
  in RE2 from where it stands: only a leading one is taken.

`translate` returns None for what RE2 cannot run alike: lookarounds, backreferences, atomic
groups and possessive quantifiers, conditionals, fuzzy matching, verbose patterns, full case
folding of characters beyond ASCII, POSIX classes, VERSION1 set operations. It reads the
pattern through `regex_tokens`, as `relax` does.
"""

from __future__ import annotations

from dataclasses import dataclass

import regex

from otel_safety.analysis.pattern_cache import compiled
from otel_safety.analysis.regex_tokens import (
    ALTERNATION,
    ANCHOR,
    ATOMIC,
    BRACE,
    CLASS,
    CLOSE,
    COMMENT,
    COUNT,
    DOT,
    ESCAPE,
    FLAGS,
    FUZZY,
    GROUP,
    ITEM_BRACKET,
    ITEM_DASH,
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
    class_end,
    group_end,
)
from otel_safety.analysis.word_edges import edge_kind

__all__ = ["Translation", "translate", "untranslatable"]

# The ASCII members of `regex`'s Unicode shorthand classes, as RE2 class items.
_ITEMS = {
    "w": "0-9A-Za-z_",
    "d": "0-9",
    "s": r"\t\n\x0b\f\r ",
}
_NEGATED_ITEMS = {
    "W": r"\x00-/:-@\[-\^`{-\x{10ffff}",
    "D": r"\x00-/:-\x{10ffff}",
    "S": r"\x00-\x08\x0e-\x1f!-\x{10ffff}",
}
_UNSUPPORTED_FLAGS = (
    regex.VERBOSE
    | regex.BESTMATCH
    | regex.ENHANCEMATCH
    | regex.WORD
    | regex.REVERSE
    | regex.POSIX
    | regex.LOCALE
)
# What names a character beyond ASCII: such a pattern cannot fold case fully on RE2.
_BEYOND_ASCII = compiled(r"[^\x00-\x7f]|\\(?:[uUNpP]|x\{|x[89a-fA-F])")
_RE2_INLINE = frozenset("imsx")
# A lookaround of one word character: what it says as \b or \B, by the kind of the
# neighbouring piece's edge ('w': a word character, 'n': another one).
_WORD_LOOKAROUNDS = {
    r"(?!\w)": {"w": r"\b", "n": r"\B"},
    r"(?=\w)": {"w": r"\B", "n": r"\b"},
    r"(?<!\w)": {"w": r"\b", "n": r"\B"},
    r"(?<=\w)": {"w": r"\B", "n": r"\b"},
}
_QUANTIFIER = compiled(r"(?:[*+?]|\{\d*,?\d*\})[?+]?")
_ESCAPE_PIECE = compiled(r"\\(?:[pP]\{[^}]*\}|x\{[^}]*\}|x..|u.{4}|U.{8}|.)")
# What RE2 takes as a group name and a property name (`\p{...}`, `\pL`).
_STRICT_NAME = compiled(r"[A-Za-z_]\w*")
_STRICT_PROPERTY = compiled(r"\{\^?[A-Za-z_]+\}|[A-Za-z]")


@dataclass(frozen=True)
class Translation:
    """The RE2 source, exact on ASCII text; `dollar_at_end`: it holds a `$` read as `\\z`,
    exact only when the text does not end with a line break."""

    source: str
    dollar_at_end: bool = False


class _Untranslatable(ValueError):
    """Syntax RE2 cannot run with the same meaning."""


def translate(source: str, flags: int = 0) -> Translation | None:
    """The RE2 form of a `regex` pattern, or None when RE2 cannot run it alike."""
    try:
        return _translate(source, flags)
    except (_Untranslatable, IndexError, ValueError):
        return None


def untranslatable(source: str, flags: int = 0) -> str | None:
    """Why RE2 cannot run `source` alike (\"lookaround (?<!x)\"), or None when it can."""
    try:
        _translate(source, flags)
    except _Untranslatable as exc:
        return str(exc)
    except (IndexError, ValueError):
        return "syntax it does not read"
    return None


def _translate(source: str, flags: int) -> Translation:
    if flags & _UNSUPPORTED_FLAGS:
        raise _Untranslatable("flags RE2 lacks (verbose, fuzzy, word, reverse, POSIX, locale)")
    if flags & regex.FULLCASE and _BEYOND_ASCII.search(source):
        raise _Untranslatable("full case folding of characters beyond ASCII")
    writer = _Writer(source, flags)
    body = writer.pattern()
    local = "".join(
        letter
        for flag, letter in ((regex.IGNORECASE, "i"), (regex.MULTILINE, "m"), (regex.DOTALL, "s"))
        if flags & flag
    )
    return Translation(f"(?{local}){body}" if local else body, writer.dollar)


class _Writer:
    """Writes the RE2 form token by token (see `regex_tokens`), tracking what a quantifier
    may follow and the source span of the piece just read (for word lookarounds)."""

    def __init__(self, source: str, flags: int) -> None:
        self.source = source
        self.lexer = Lexer(source, bool(flags & regex.VERSION1))
        self.lines = bool(flags & regex.MULTILINE)
        self.out: list[str] = []
        self.after_atom = False  # a quantifier may follow
        self.after_quantifier = False
        self.dollar = False
        self.lines_scoped = False  # an inline (?m) scope: `$` there is a line end
        self.opened: list[int] = []  # where each open group starts in the source
        self.last_atom: tuple[int, int] | None = None  # source span of the piece just read

    def pattern(self) -> str:
        while self.lexer.more():
            self._token(self.lexer.next())
        return "".join(self.out)

    def _emit(
        self, text: str, *, atom: bool = False, quantifier: bool = False, start: int | None = None
    ) -> None:
        self.out.append(text)
        self.after_atom = atom
        self.after_quantifier = quantifier
        if quantifier and self.last_atom is not None:
            self.last_atom = (self.last_atom[0], self.lexer.at)
        elif atom and start is not None:
            self.last_atom = (start, self.lexer.at)
        elif not quantifier:
            self.last_atom = None

    def _token(self, token: Token) -> None:
        kind = token.kind
        if kind == ESCAPE:
            self._escape(token)
            if self.after_atom:
                self.last_atom = (token.start, token.end)
        elif kind == CLASS:
            self._class(token)
            self.last_atom = (token.start, token.end)
        elif kind == GROUP:
            self._group(token)
        elif kind == CLOSE:
            self._emit(")", atom=True, start=self.opened.pop() if self.opened else None)
        elif kind == ANCHOR and token.char == "$":
            if self.lines:
                self._emit("$")
            elif self.lines_scoped:
                raise _Untranslatable("$ under a scoped flag")
            else:
                self.dollar = True
                self._emit(r"\z")
        elif kind == ANCHOR:
            if not self.lines and self.lines_scoped:
                raise _Untranslatable("^ under a scoped flag")
            self._emit("^")
        elif kind == QUANTIFIER:
            self._simple_quantifier(token.char)
        elif kind == COUNT:
            self._counted(token.argument)
        elif kind == FUZZY:
            raise _Untranslatable("fuzzy matching")
        elif kind == BRACE:
            self._emit(r"\{", atom=True)
        elif kind == ALTERNATION:
            self._emit("|")
        elif kind == DOT:
            self._emit(".", atom=True, start=token.start)
        else:  # literal characters: a quantifier after them takes the last
            self._emit("".join(map(_literal, token.char)), atom=True, start=token.end - 1)

    def _simple_quantifier(self, char: str) -> None:
        if self.after_quantifier:
            if char == "?":
                last = self.last_atom
                self._emit("?")  # lazy
                self.last_atom = last and (last[0], self.lexer.at)
                return
            raise _Untranslatable("possessive or repeated quantifier")
        if not self.after_atom:
            raise _Untranslatable("quantifier without an atom")
        self._emit(char, quantifier=True)

    def _counted(self, count: tuple[str, str, str]) -> None:
        low, comma, high = count
        if not low and not comma:
            raise _Untranslatable("empty count")
        if self.after_quantifier:
            raise _Untranslatable("repeated quantifier")
        if not self.after_atom:
            # `regex` reads `{2}` with nothing before it as literal text
            raise _Untranslatable("count without an atom")
        if max(int(low or 0), int(high or 0)) > 1000:
            raise _Untranslatable("count above RE2's limit")
        self._emit("{" + (low or "0") + comma + high + "}", quantifier=True)

    def _escape(self, token: Token) -> None:
        char = token.char
        if char in "bB":
            self._emit("\\" + char)
        elif char == "A":
            self._emit(r"\A")
        elif char == "Z":
            self._emit(r"\z")  # `regex`'s \Z is the very end, like RE2's \z
        elif char in _ITEMS:
            self._emit(f"[{_ITEMS[char]}]", atom=True)
        elif char in _NEGATED_ITEMS:
            self._emit(f"[{_NEGATED_ITEMS[char]}]", atom=True)
        elif char.isdigit() and char != "0":
            raise _Untranslatable("backreference")
        else:
            self._emit(_plain_escape(char, token.argument), atom=True)

    def _word_lookaround(self, lookaround: str, boundaries: dict[str, str], at: int) -> None:
        end = at + len(lookaround)
        kind = _word_lookaround_edge(self, lookaround.startswith("(?<"), end)
        if kind is None:
            raise _Untranslatable(f"lookaround {lookaround}")
        self.lexer.at = end
        last = self.last_atom
        self._emit(boundaries[kind])
        self.last_atom = last  # a boundary is no piece: the lookahead after it leans on `last`

    def _class(self, token: Token) -> None:
        """A character class, item by item in RE2's spelling."""
        parts = ["[^" if token.argument else "["]
        for item in token.items:
            if item.kind == ITEM_ESCAPE:
                escaped = item.char
                if escaped in _ITEMS:
                    parts.append(_ITEMS[escaped])
                elif escaped in _NEGATED_ITEMS:
                    parts.append(_NEGATED_ITEMS[escaped])
                elif escaped == "b":
                    parts.append(r"\x08")
                elif escaped in "pP":
                    parts.append(_plain_escape(escaped, item.argument))
                elif escaped.isalnum() and escaped not in "tnrfvaxuU0":
                    raise _Untranslatable("escape in class")
                else:
                    parts.append(_plain_escape(escaped, item.argument))
            elif item.kind == ITEM_BRACKET:
                if self.lexer.sets or item.argument:
                    raise _Untranslatable("nested set or POSIX class")
                parts.append(r"\[")
            elif item.kind == ITEM_SET_OPERATION:
                raise _Untranslatable("set operation")
            elif item.kind == ITEM_DASH:
                parts.append("-")
            elif item.kind == ITEM_END:
                raise IndexError("class never closes")
            else:
                parts.append(_literal(item.char))
        parts.append("]")
        self._emit("".join(parts), atom=True)

    def _group(self, token: Token) -> None:
        opener, start = token.char, token.start
        if opener == COMMENT:
            return
        if opener == LOOKAROUND:
            for lookaround, boundaries in _WORD_LOOKAROUNDS.items():
                if self.source.startswith(lookaround, start):
                    self._word_lookaround(lookaround, boundaries, start)
                    return
        self.opened.append(start)
        if opener == NAMED and _STRICT_NAME.fullmatch(token.argument):
            self._emit(f"(?P<{token.argument}>")
            return
        if opener == FLAGS:
            on, off, end, text = token.argument
            if not set(on + off) <= _RE2_INLINE - {"x"}:
                raise _Untranslatable(f"inline flags {text}")
            if end == ")":
                if start != 0 or off:
                    raise _Untranslatable("inline flags after the start")
                self.lines = self.lines or "m" in on
            elif "m" in on + off:
                self.lines_scoped = True
            self._emit(text)
            return
        if opener == LOOKAROUND:
            raise _Untranslatable(f"lookaround {token.argument}...)")
        rest = self.source[start : start + 4]
        if opener == NAMED_REFERENCE or rest.startswith(("(?&", "(?R", "(?(")):
            raise _Untranslatable("backreference, recursion or conditional")
        if opener == ATOMIC:
            raise _Untranslatable("atomic group")
        if opener != PLAIN:
            raise _Untranslatable(f"group {rest}")
        self._emit("(")


def _plain_escape(char: str, argument: str | None) -> str:
    """An escape that means one character, in RE2's spelling (`argument`: what the lexer
    read after it)."""
    if char in "uU":
        if argument is None:
            raise _Untranslatable("bad \\u escape")
        return f"\\x{{{argument}}}"
    if char == "x":
        if argument is None:
            raise _Untranslatable("bad \\x escape")
        return f"\\x{argument}"
    if char == "0":
        return f"\\x{{{int('0' + argument, 8):x}}}"
    if char in "pP":
        # a Unicode property: RE2 knows scripts and general categories, as `regex` does
        if argument is None or not _STRICT_PROPERTY.fullmatch(argument):
            raise _Untranslatable("property")
        return f"\\{char}{argument}"
    if char.isalnum():
        if char in "tnrf":
            return "\\" + char
        if char == "v":
            return r"\x0b"
        if char == "a":
            return r"\x07"
        raise _Untranslatable(f"escape \\{char}")
    return _literal(char)


def _word_lookaround_edge(writer: _Writer, behind: bool, end: int) -> str | None:
    """The kind of the piece a word lookaround leans on: the one before a lookahead, the
    one after a lookbehind (`end`: where the lookaround ends)."""
    if not behind:
        if writer.last_atom is None:
            return None
        start, stop = writer.last_atom
        return edge_kind(writer.source[start:stop], last=True)
    stop = _piece_end(writer.source, end)
    if stop is None:
        return None
    return edge_kind(writer.source[end:stop], last=False)


def _piece_end(source: str, at: int) -> int | None:
    """Where the piece starting at `at` (an atom or a group, with its quantifier) ends."""
    if at >= len(source) or source[at] in "|)":
        return None
    if source[at] == "(":
        end = group_end(source, at)
        if end is None:
            return None
        at = end
    elif source[at] == "[":
        at = class_end(source, at)
    elif source[at] == "\\":
        found = _ESCAPE_PIECE.match(source, at)
        if found is None:
            return None
        at = found.end()
    else:
        at += 1
    quantifier = _QUANTIFIER.match(source, at)
    return quantifier.end() if quantifier else at


def _literal(char: str) -> str:
    """One literal character in a form RE2 reads as that character."""
    if char.isalnum() or char == "_":
        return char
    if 0x20 < ord(char) < 0x7F:
        return "\\" + char  # RE2 reads an escaped punctuation mark as itself
    return f"\\x{{{ord(char):x}}}"
