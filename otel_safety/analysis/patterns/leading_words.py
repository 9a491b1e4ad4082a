"""Which words every match of a pattern starts with, read off its parse tree.

A pattern that opens on a word boundary and a word (r"\\bhow to (?:make|build) a bomb") can
only match where that word starts, so `pattern_index` tries it only there. The words are
given as keys, the form in which `pattern_index` records the words of a text: a whole
lowercase word followed by a space ("how "), or a word's first three or four characters
("expl" for "explo(?:de|sive)"). A pattern whose start the tree does not pin down may still
need some words somewhere in the text (`needs`); one anchored at the start of the text is
tried there only. The tree comes from `regex_syntax`; without one, a pattern is searched in
full.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from otel_safety.analysis import pattern_cache
from otel_safety.analysis.patterns import regex_syntax
from otel_safety.analysis.patterns.regex_syntax import (
    AT,
    BRANCH,
    GROUPS,
    IN,
    LITERAL,
    LOOKAROUNDS,
    REPEATS,
    TEXT_STARTS,
    WORD_BOUNDARIES,
    Node,
    parse,
)

__all__ = ["MIN_PREFIX", "PREFIX", "SEARCH_IN_FULL", "Triggers", "triggers"]

# A word is keyed whole and by its first MIN_PREFIX and PREFIX characters; longer trigger
# prefixes are cut to PREFIX, and shorter ones are not used (`_indexable` drops them).
PREFIX = 4
MIN_PREFIX = 3
# With more possible start keys than this, a pattern is not indexed by its start.
_MAX_TRIGGERS = 4000
# The key of "a word ends here", only ever part of a longer key.
_WORD_END = frozenset({" "})


@dataclass(frozen=True)
class Triggers:
    """What a text must show for a pattern to be worth trying.

    `starts`: keys of the words a match must start at (None: it may start anywhere);
    `needs`: sets of keys, each of which must meet the text somewhere;
    `anchored`: the pattern only matches at the start of the text.
    """

    starts: frozenset[str] | None = None
    needs: tuple[frozenset[str], ...] = ()
    anchored: bool = False


# A pattern the tree says nothing about: tried everywhere.
SEARCH_IN_FULL = Triggers()


def triggers(source: str) -> Triggers:
    """What a text must show for `source` (compiled case-insensitively) to match in it
    (worked out once per machine: parsing every indexed pattern was much of start-up)."""
    starts, needs, anchored = pattern_cache.remembered(
        "triggers", source, lambda: _as_plain(_triggers(source)), (__name__, regex_syntax.__name__)
    )
    return Triggers(starts, needs, anchored)


def _as_plain(found: Triggers) -> tuple:
    return found.starts, found.needs, found.anchored


def _triggers(source: str) -> Triggers:
    parsed = parse(source, ignore_case=True)
    if parsed is None:
        return SEARCH_IN_FULL
    body = [node for node in parsed if node[0] not in LOOKAROUNDS]
    if body and body[0][0] == AT and body[0][1] in TEXT_STARTS:
        return Triggers(anchored=True)
    starts = None
    if body and body[0][0] == AT and body[0][1] in WORD_BOUNDARIES:
        starts = _first(body, 1)
        if starts is not None and not _indexable(starts):
            starts = None
    needs = () if starts else tuple(need for need in _needs(body) if _indexable(need))
    return Triggers(starts, needs)


def _indexable(keys: frozenset[str]) -> bool:
    """Whether the scan indexes every key: whole words, and prefixes of three or more."""
    return all(
        (key.endswith(" ") and len(key) > 1) or (not key.endswith(" ") and len(key) >= MIN_PREFIX)
        for key in keys
    )


def _first(
    seq: Sequence[Node], i: int = 0, room: int = PREFIX, started: bool = False
) -> frozenset[str] | None:
    """Keys that every match of seq[i:] starts with, if the parse tree tells: a whole word as
    "word ", else its first `room` characters; " " alone when a word ends right here (only
    once `started`, that is, after some characters of the word)."""
    while i < len(seq):
        op, arg = seq[i]
        if op == AT:
            if started and arg in WORD_BOUNDARIES:
                return _WORD_END
            i += 1
            continue
        if op in LOOKAROUNDS:
            i += 1
            continue
        if op == LITERAL:
            if not _is_word(chr(arg)):
                return _WORD_END if started else None
            run = _literal_run(seq, i)
            return _extend(run, seq, i + len(run), room)
        if op == IN:
            chars = [chr(c) for kind, c in arg if kind == LITERAL]
            if len(chars) == len(arg) and all(_is_word(c) for c in chars):
                return _union_sets(_extend(c.lower(), seq, i + 1, room) for c in chars)
            if started and len(chars) == len(arg) and not any(_is_word(c) for c in chars):
                return _WORD_END
            return None
        if op in GROUPS:
            return _first([*arg[-1], *seq[i + 1 :]], 0, room, started)
        if op == BRANCH:
            return _union_sets(_first([*alt, *seq[i + 1 :]], 0, room, started) for alt in arg[1])
        if op in REPEATS:
            low, _, body = arg
            with_body = _first([*body, *seq[i + 1 :]], 0, room, started)
            if low >= 1:
                return with_body
            return _union_sets((with_body, _first(seq, i + 1, room, started)))
        return None
    return None


def _extend(run: str, seq: Sequence[Node], j: int, room: int) -> frozenset[str]:
    """Keys for a word that starts with `run` and goes on as seq[j:] says."""
    if _word_ends(seq, j):
        return frozenset({run + " "})
    if len(run) >= room:
        return frozenset({run[:room]})
    rest = _first(seq, j, room - len(run), started=True)
    if rest is None:
        return frozenset({run})
    return frozenset(run + key for key in rest)


def _needs(seq: Sequence[Node]) -> tuple[frozenset[str], ...]:
    """Word-beginning sets the text must contain for a pattern without a known start."""
    needs, at_word = [], False
    for i, (op, arg) in enumerate(seq):
        if op == AT:
            at_word = arg in WORD_BOUNDARIES
            continue
        if op in LOOKAROUNDS:
            continue
        if op in REPEATS and arg[0] == 0:
            at_word = at_word and _ends_apart(arg[2])
            continue
        if at_word and (found := _first(seq, i)):
            needs.append(found)
        at_word = _ends_apart([(op, arg)])
    return tuple(needs)


def _ends_apart(seq: Sequence[Node]) -> bool:
    """Whether whatever seq matches ends where a new word may begin."""
    if not seq:
        return False
    op, arg = seq[-1]
    if op == LITERAL:
        return not _is_word(chr(arg))
    if op == AT:
        return arg in WORD_BOUNDARIES
    if op in GROUPS:
        return _ends_apart(arg[-1])
    if op == BRANCH:
        return all(_ends_apart(alt) for alt in arg[1])
    if op in REPEATS:
        return _ends_apart(arg[2])
    return False


def _word_ends(seq: Sequence[Node], i: int) -> bool:
    """Whether the pattern guarantees a word ends at seq[i] (a space, a \\b, ...)."""
    if i >= len(seq):
        return False
    op, arg = seq[i]
    if op == LITERAL:
        return not _is_word(chr(arg))
    if op == IN:
        return all(kind == LITERAL and not _is_word(chr(c)) for kind, c in arg)
    return op == AT and arg in WORD_BOUNDARIES


def _literal_run(seq: Sequence[Node], i: int) -> str:
    chars = []
    while i < len(seq) and seq[i][0] == LITERAL and _is_word(chr(seq[i][1])):
        chars.append(chr(seq[i][1]).lower())
        i += 1
    return "".join(chars)


def _union_sets(sets: Iterable[frozenset[str] | None]) -> frozenset[str] | None:
    merged: set[str] = set()
    for found in sets:
        if not found:
            return None
        merged |= found
        if len(merged) > _MAX_TRIGGERS:
            return None
    return frozenset(merged)


def _is_word(char: str) -> bool:
    return char.isalnum() or char == "_"
