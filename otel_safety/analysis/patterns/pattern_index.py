"""Many long patterns, tried only where a text shows the words they start with.

The refusal family asks a few hundred patterns of every input and output, and searching a
long prompt with each of them in turn would be the pipeline's main cost. So every pattern
is filed under the words a match must start with (`leading_words`), a text's words are read
once, and a group of patterns only tries those its words can set off, at the places those
words occur. Patterns whose start is not known are searched in full, but only when the
words they need occur somewhere (or, anchored, only at the start of the text).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import regex

from otel_safety.analysis.memo import content_memo
from otel_safety.analysis.pattern_cache import compiled
from otel_safety.analysis.patterns.leading_words import MIN_PREFIX, PREFIX, triggers
from otel_safety.analysis.prefilter import FamilyOnUse, may_match

__all__ = ["IndexedPattern", "PatternIndex", "TextScan", "scan_text"]

_WORD = compiled(r"\w+")


@dataclass(frozen=True, eq=False)
class IndexedPattern:
    """One pattern and what a text must show for it to be worth trying.

    `starts`: keys of the words a match must start at (None: it may start anywhere);
    `needs`: sets of keys, each of which must meet the text somewhere;
    `anchored`: the pattern only matches at the start of the text.
    A key is a whole lowercase word followed by a space, or a word's first 3-4 characters."""

    pattern: regex.Pattern
    starts: frozenset[str] | None
    needs: tuple[frozenset[str], ...]
    anchored: bool

    @staticmethod
    def of(source: str, pattern: regex.Pattern) -> IndexedPattern:
        """`pattern`, compiled from `source`, filed by what its parse tree shows."""
        found = triggers(source)
        return IndexedPattern(pattern, found.starts, found.needs, found.anchored)


@dataclass(frozen=True, eq=False)
class _Group:
    """The patterns of one group, indexed by the keys that set them off."""

    by_key: Mapping[str, tuple[int, ...]]  # key -> patterns that start at such a word
    other: tuple[int, ...]  # patterns without known starts: anchored, gated by needs, or free
    # Linear-time prefilter (see analysis.prefilter). One RE2 set over every group would
    # read a text once, but its automaton (hundreds of patterns, all matches wanted) keeps
    # outgrowing its cache: several times slower than one search per group asked.
    relaxed: FamilyOnUse | None = None


@dataclass(frozen=True, eq=False)
class PatternIndex:
    """All pattern groups, and every key any pattern asks for, so a text is read once however
    many patterns there are, and a group only tries the patterns its words can set off."""

    groups: Mapping[str, _Group]
    patterns: tuple[IndexedPattern, ...]
    keys: frozenset[str]

    @staticmethod
    def build(groups: Mapping[str, Sequence[tuple[str, regex.Pattern]]]) -> PatternIndex:
        """Index groups of (source, compiled pattern) pairs."""
        patterns: list[IndexedPattern] = []
        indexed: dict[str, _Group] = {}
        keys: set[str] = set()
        for group, pairs in groups.items():
            filed = [IndexedPattern.of(source, pattern) for source, pattern in pairs]
            with_starts = [p for p in filed if p.starts is not None]
            by_key: dict[str, list[int]] = {}
            other = []
            for pattern in [*with_starts, *(p for p in filed if p.starts is None)]:
                keys.update(pattern.starts or (), *pattern.needs)
                for key in pattern.starts or ():
                    by_key.setdefault(key, []).append(len(patterns))
                if pattern.starts is None:
                    other.append(len(patterns))
                patterns.append(pattern)
            indexed[group] = _Group(
                {k: tuple(v) for k, v in by_key.items()},
                tuple(other),
                FamilyOnUse([p.pattern for p in filed], whole_text=True),
            )
        return PatternIndex(indexed, tuple(patterns), frozenset(keys))


@dataclass(eq=False)
class TextScan:
    """One text read against the index: its words, and which keys they show."""

    index: PatternIndex
    text: str
    occurrences: Mapping[str, list[int]] = field(default_factory=dict)  # word -> offsets
    shown_by: Mapping[str, list[str]] = field(default_factory=dict)  # key -> words
    present: frozenset[str] = frozenset()
    _positions: dict[str, list[int]] = field(default_factory=dict)
    _found: dict[str, tuple[regex.Match, ...]] = field(default_factory=dict)

    def find(self, group: str) -> list[regex.Match]:
        """Every match of the group's patterns, in text order (one per start position).
        Each group is searched once per text, however many detectors ask."""
        found = self._found.get(group)
        if found is None:
            found = self._found[group] = tuple(self._find(group))
        return list(found)

    def _find(self, group: str) -> list[regex.Match]:
        index = self.index.groups.get(group)
        if index is None or not self.text or not may_match(index.relaxed, self.text):
            return []
        starts: dict[int, list[int]] = {}
        for key in index.by_key.keys() & self.present:
            for number in index.by_key[key]:
                starts.setdefault(number, []).extend(self.positions(key))
        hits: list[regex.Match] = []
        for number, positions in starts.items():
            hits.extend(self._tried_at(self.index.patterns[number], positions))
        for number in index.other:
            hits.extend(self._searched(self.index.patterns[number]))
        hits.sort(key=lambda m: (m.start(), -m.end()))
        return hits

    def first(self, group: str) -> regex.Match | None:
        if group not in self._found:
            self.find(group)
        hits = self._found[group]
        return hits[0] if hits else None

    def positions(self, key: str) -> list[int]:
        """Offsets of the words that show `key`, in order."""
        if key not in self._positions:
            words = self.shown_by[key]
            if len(words) == 1:
                self._positions[key] = self.occurrences[words[0]]
            else:
                self._positions[key] = sorted(p for w in words for p in self.occurrences[w])
        return self._positions[key]

    def _tried_at(self, indexed: IndexedPattern, positions: list[int]) -> list[regex.Match]:
        if len(indexed.starts or ()) > 1:
            positions = sorted(set(positions))
        out, end = [], -1
        for position in positions:
            if position >= end and (found := indexed.pattern.match(self.text, position)):
                out.append(found)
                end = found.end()
        return out

    def _searched(self, indexed: IndexedPattern) -> list[regex.Match]:
        if indexed.anchored:
            found = indexed.pattern.match(self.text)
            return [found] if found else []
        if any(need.isdisjoint(self.present) for need in indexed.needs):
            return []
        return list(indexed.pattern.finditer(self.text))


@content_memo  # every text of a trace is read once, however long the trace
@functools.lru_cache(maxsize=64)  # outside a trace (the inline guard), the last few texts
def scan_text(index: PatternIndex, text: str) -> TextScan:
    """Index the words of `text` once; detectors ask several questions of the same text."""
    if not text:
        return TextScan(index, text)
    lowered = text.lower()
    if len(lowered) != len(text):  # a rare letter whose lower case is longer: keep offsets
        lowered = "".join(char if len(char.lower()) != 1 else char.lower() for char in text)
    keys, shown_by = index.keys, {}
    for word in set(_WORD.findall(lowered)):  # distinct words, read at C speed
        short, long = word[:MIN_PREFIX], word[:PREFIX]
        for key in (word + " ", short) if short == long else (word + " ", short, long):
            if key in keys:
                shown_by.setdefault(key, []).append(word)
    occurrences: dict[str, list[int]] = {word: [] for words in shown_by.values() for word in words}
    if occurrences:  # where each wanted word stands as a whole token, in one pass
        for token in _WORD.finditer(lowered):
            places = occurrences.get(token.group())
            if places is not None:
                places.append(token.start())
    return TextScan(index, text, occurrences, shown_by, frozenset(shown_by))
