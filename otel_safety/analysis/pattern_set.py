"""Which of many patterns can match a text, found in one linear-time pass over it.

A detector that tries a list of patterns one after another on the same text pays one search
per pattern, and most of them find nothing. Here the relaxed RE2 form of every entry (one
pattern, or a family of patterns as one alternation; see `relax`) goes into one RE2 set,
searched once per text: an entry the set does not report cannot match, so only the
reported entries (and those RE2 cannot take) are tried, in their own order, and every
result stays exactly what the patterns say.

With `whole_text` (the default) the relaxed forms keep their anchors, so the patterns must
run on the very text the set reads (a whole-text `search`, `finditer` or `match` at any
position); without it anchors and lookarounds are dropped, and the answer holds for any
part of the text too (sentences, `pos`/`endpos` windows).

Keep a set to a few dozen entries: RE2 runs a set as one automaton that must read the whole
text and report every entry, and with hundreds of patterns its states outgrow the cache, so
the pass gets slower than one search per entry (the refusal markers' 33 groups of 292
patterns took 5 ms per text). If RE2 cannot run the set on a text (it always reports a
catch-all entry, so a failure shows), every entry counts as a candidate.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import regex

from otel_safety.analysis.case_folds import folds_wide, source_folds_wide
from otel_safety.analysis.memo import content_memo
from otel_safety.analysis.relax import relax

try:
    import re2
except ImportError:  # without RE2 every entry is a candidate: slower, never wrong
    re2 = None

__all__ = ["PatternSet", "relaxed_source"]

_RE2_MAX_MEM = 64 << 20
_FULL_CASE = regex.FULLCASE | regex.IGNORECASE


def relaxed_source(pattern: Any, *, whole_text: bool) -> tuple[str, bool] | None:
    """The relaxed RE2 source of one compiled pattern with its flags made local, and
    whether it folds case fully (then it proves nothing about a text with a character a
    full fold widens, see `case_folds`); None when RE2 cannot take it, or cannot rule out
    its matches at all. `whole_text`: the pattern runs on the text RE2 reads, anchors stay."""
    full_case = pattern.flags & _FULL_CASE == _FULL_CASE
    if full_case and source_folds_wide(pattern.pattern):
        return None  # "ß" in a full-case pattern matches "ss": RE2 cannot rule it out
    relaxed = relax(pattern.pattern, pattern.flags, keep_anchors=whole_text)
    if relaxed is None:
        return None
    local = ("i" if pattern.flags & regex.IGNORECASE else "") + (
        "s" if pattern.flags & regex.DOTALL else ""
    )
    source = f"(?{local}:{relaxed})" if local else f"(?:{relaxed})"
    return source, full_case


class PatternSet:
    """Entries (each a sequence of patterns) searched together: `candidates(text)` are the
    indices of the entries that may match `text`; the others cannot."""

    def __init__(self, entries: Sequence[Sequence[Any]], *, whole_text: bool = True) -> None:
        self.size = len(entries)
        always: list[int] = []  # RE2 cannot take them: always tried
        full_case: list[int] = []  # proven absent only in texts no full fold widens
        sources: dict[int, str] = {}
        for number, patterns in enumerate(entries):
            relaxed = [relaxed_source(p, whole_text=whole_text) for p in patterns]
            if not patterns or any(r is None for r in relaxed):
                if patterns:
                    always.append(number)
                continue
            sources[number] = "|".join(source for source, _ in relaxed)  # type: ignore[misc]
            if any(full for _, full in relaxed):  # type: ignore[misc]
                full_case.append(number)
        self._always = frozenset(always)
        self._full_case = frozenset(full_case)
        self._all = frozenset(number for number, patterns in enumerate(entries) if patterns)
        self._set, self._numbers, self._sentinel = self._compile(sources)
        if self._set is None:
            self._always = self._all

    def _compile(self, sources: dict[int, str]) -> tuple[Any, tuple[int, ...], int]:
        if re2 is None or not sources:
            return None, (), -1
        options = re2.Options()
        options.log_errors = False
        options.never_capture = True
        options.max_mem = _RE2_MAX_MEM
        found = re2.Set.SearchSet(options)
        numbers = []
        try:
            for number, source in sources.items():
                found.Add(source.encode())
                numbers.append(number)
            sentinel = found.Add(b"")  # matches every text: missing means RE2 gave up
            found.Compile()
        except re2.error:
            return None, (), -1
        return found, tuple(numbers), sentinel

    def candidates(self, text: str) -> frozenset[int]:
        """Indices of the entries that may match `text` (all of them when unsure)."""
        if self._set is None:
            return self._all
        return _candidates(self, text)

    def _search(self, text: str) -> frozenset[int]:
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError:  # lone surrogates: RE2 cannot read the text as it is
            return self._all
        reported = self._set._set.Match(data)  # google-re2's own call, not its wrapper
        if self._sentinel not in reported:
            return self._all
        numbers = self._numbers
        found = {numbers[i] for i in reported if i != self._sentinel}
        found |= self._always
        if self._full_case and folds_wide(text):
            found |= self._full_case
        return frozenset(found)


@content_memo
def _candidates(patterns: PatternSet, text: str) -> frozenset[int]:
    return patterns._search(text)
