"""Whether a pattern's matches always start (or end) with a word character, or never do.

RE2 has no lookarounds, but a word-character lookaround next to a piece whose edge is known
is a word boundary: after a piece that always ends with a word character, `(?!\\w)` says
exactly what `\\b` says; after one that never does, what `\\B` says. `re2_syntax` rewrites
such lookarounds this way. On ASCII text only (the only text RE2 twins read), so word
characters are `[0-9A-Za-z_]`.
"""

from __future__ import annotations

from typing import Any

from otel_safety.analysis.patterns.regex_syntax import GROUPS, LOOKAROUNDS, REPEATS, parse

__all__ = ["edge_kind"]

_WORD = frozenset(range(48, 58)) | frozenset(range(65, 91)) | frozenset(range(97, 123)) | {95}
_BOTH = frozenset("wn")


def edge_kind(fragment: str, *, last: bool) -> str | None:
    """'w' when every match of `fragment` ends (`last`) or starts with a word character,
    'n' when none does, None when it varies, is unknown, or the match may be empty."""
    tree = parse(fragment)
    if tree is None:
        return None
    kinds = _sequence(tree, last)
    if kinds is None or len(kinds) != 1:
        return None
    return next(iter(kinds))


def _sequence(nodes: list, last: bool) -> frozenset[str] | None:
    """The kinds of the edge character, or None when the sequence may match nothing."""
    kinds: frozenset[str] = frozenset()
    for op, argument in reversed(nodes) if last else nodes:
        found, may_be_empty = _node(op, argument, last)
        kinds |= found
        if not may_be_empty:
            return kinds
    return None


def _node(op: Any, argument: Any, last: bool) -> tuple[frozenset[str], bool]:
    name = str(op)
    if name == "LITERAL":
        if argument >= 0x80:
            return _BOTH, False  # beyond ASCII (case folding may reach ASCII): unknown
        return frozenset("w" if argument in _WORD else "n"), False
    if name == "IN":
        return _class_kinds(argument), False
    if name == "AT" or op in LOOKAROUNDS:
        return frozenset(), True
    if op in REPEATS:
        low, _, body = argument
        inner = _sequence(list(body), last)
        return (inner or frozenset(), low == 0 or inner is None)
    if op in GROUPS:
        inner = _sequence(list(argument[-1]), last)
        return (inner or frozenset(), inner is None)
    if name == "BRANCH":
        kinds: frozenset[str] = frozenset()
        empty = False
        for branch in argument[1]:
            inner = _sequence(list(branch), last)
            if inner is None:
                empty = True
            else:
                kinds |= inner
        return kinds, empty
    return _BOTH, True  # anything else (any character, backreferences): unknown


def _class_kinds(items: list) -> frozenset[str]:
    members: set[int] = set()
    negated = False
    for op, argument in items:
        name = str(op)
        if name == "NEGATE":
            negated = True
        elif name == "LITERAL":
            if argument >= 0x80:
                return _BOTH
            members.add(argument)
        elif name == "RANGE":
            low, high = argument
            if high >= 0x80:
                return _BOTH
            members.update(range(low, high + 1))
        elif name == "CATEGORY":
            category = str(argument)
            if category.endswith("_WORD") and "NOT" not in category:
                members |= _WORD
            elif category.endswith("_DIGIT") and "NOT" not in category:
                members.update(range(48, 58))
            elif category.endswith("_SPACE") and "NOT" not in category:
                members.update((9, 10, 11, 12, 13, 28, 29, 30, 31, 32))
            else:
                return _BOTH
        else:
            return _BOTH
    if negated:
        members = set(range(128)) - members
    kinds = {"w" if member in _WORD else "n" for member in members}
    return frozenset(kinds)
