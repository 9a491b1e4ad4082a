"""One linear-time search for a whole family of patterns, before any pattern runs on its own.

Rule families are judged a sentence at a time, or pattern by pattern at the places their
words occur; most texts match none of a family's patterns. The family's relaxed RE2
alternation (see `relax`), searched once over the whole text in linear time, proves most
texts have nothing to find, so the exact (backtracking) patterns run only where they can
succeed, and findings stay exactly what the patterns say.

Without RE2, or for a family it cannot take, the family's `regex` alternation serves: over
the whole text when no pattern looks past its own match (anchors and lookarounds see other
characters at a sentence's edge), else a sentence at a time, which is exact for any pattern.

A family's RE2 alternation is compiled on its first search, not when the detectors are
built: start-up stays short, and a family no text reaches costs nothing.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import regex

from otel_safety.analysis import linear
from otel_safety.analysis.case_folds import folds_wide, source_folds_wide
from otel_safety.analysis.memo import content_memo
from otel_safety.analysis.pattern_cache import compiled
from otel_safety.analysis.relax import relax

try:
    import re2
except ImportError:  # the pure-regex path below is exact, only slower
    re2 = None
_UNANCHORED = None if re2 is None else re2._Anchor.UNANCHORED

__all__ = [
    "FamilyOnUse",
    "Prefilter",
    "RelaxedFamily",
    "may_match",
    "may_occur",
    "relaxed_family",
    "utf8",
]

_CLASSES = compiled(r"\[(?:\\.|[^\]\\])*\]")
_CONTEXT_SENSITIVE = compiled(r"\(\?<?[=!]|\^|\$|\\[AZzG]")
_RE2_MAX_MEM = 64 << 20
_FULL_CASE = regex.FULLCASE | regex.IGNORECASE


@content_memo
def utf8(text: str) -> bytes:
    """The text as RE2 reads it, encoded once (lone surrogates replaced)."""
    return text.encode("utf-8", "replace")


_COMPILE_LOCK = threading.Lock()


@dataclass(frozen=True, eq=False)
class RelaxedFamily:
    """A family's relaxed RE2 alternation (`source`), compiled on first use; `full_case`
    when a pattern folds case fully (see `relax`): it then proves nothing about texts with
    a character a full fold widens (`case_folds`)."""

    source: str
    full_case: bool = False
    _compiled: list = field(default_factory=list, init=False, repr=False)  # [] until built

    @property
    def regex(self) -> Any:
        """The compiled alternation, or None when RE2 refuses it (beyond its memory bound):
        then the family proves nothing."""
        if not self._compiled:
            with _COMPILE_LOCK:
                if not self._compiled:
                    self._compiled.append(_compile_family(self.source))
        return self._compiled[0]

    def may_match(self, text: str) -> bool:
        if self.full_case and folds_wide(text):
            return True
        alternation = self.regex
        if alternation is None:
            return True
        data = utf8(text)  # google-re2's own call: its wrapper builds a match object
        return alternation._regexp.Match(_UNANCHORED, data, 0, len(data))[0][0] != -1


def _compile_family(source: str) -> Any:
    options = re2.Options()
    options.log_errors = False
    options.never_capture = True
    options.max_mem = _RE2_MAX_MEM
    try:
        return re2.compile(source.encode(), options)
    except re2.error:
        return None


def relaxed_family(
    patterns: Sequence[regex.Pattern], *, whole_text: bool = False
) -> RelaxedFamily | None:
    """One RE2 alternation matching wherever any of `patterns` may (compiled on its first
    search), or None when a pattern has no relaxed form.

    `whole_text`: the patterns run on the very text the family is searched in (not on its
    sentences), so their anchors can stay.
    """
    if re2 is None or not patterns:
        return None
    alternatives = []
    for pattern in patterns:
        relaxed = relax(pattern.pattern, pattern.flags, keep_anchors=whole_text)
        if relaxed is None:
            return None
        local = ("i" if pattern.flags & regex.IGNORECASE else "") + (
            "s" if pattern.flags & regex.DOTALL else ""
        )
        alternatives.append(f"(?{local}:{relaxed})" if local else f"(?:{relaxed})")
    full_case = [p for p in patterns if p.flags & _FULL_CASE == _FULL_CASE]
    if any(source_folds_wide(p.pattern) for p in full_case):
        return None  # "ß" in a full-case pattern matches "ss": RE2 cannot rule it out
    return RelaxedFamily("|".join(alternatives), bool(full_case))


class FamilyOnUse:
    """`relaxed_family(patterns)` worked out on the first search, not when the patterns
    are indexed: relaxing hundreds of patterns was a fifth of a judging process's start-up,
    and a family some texts never reach need not be relaxed at all."""

    def __init__(self, patterns: Sequence[regex.Pattern], *, whole_text: bool = False) -> None:
        self._patterns: tuple[regex.Pattern, ...] | None = tuple(patterns)
        self._whole_text = whole_text
        self._family: RelaxedFamily | None = None

    @property
    def family(self) -> RelaxedFamily | None:
        """The relaxed family (None when a pattern has no relaxed form)."""
        if self._patterns is not None:
            with _COMPILE_LOCK:
                if self._patterns is not None:
                    self._family = relaxed_family(self._patterns, whole_text=self._whole_text)
                    self._patterns = None  # marks it done
        return self._family

    def may_match(self, text: str) -> bool:
        family = self.family
        return family is None or family.may_match(text)


def may_match(relaxed: RelaxedFamily | FamilyOnUse | None, text: str) -> bool:
    """False only when the relaxed family proves that nothing in `text` can match."""
    return relaxed is None or relaxed.may_match(text)


def may_occur(pattern: Any, text: str) -> bool:
    """False only when `pattern` can match in no part of `text` (no sentence, no window):
    one linear RE2 pass before a pattern that `regex` would search sentence by sentence, or
    over a long text its lookarounds keep off RE2."""
    return _family_of(pattern).may_match(text)


@functools.lru_cache(maxsize=256)
def _family_of(pattern: Any) -> FamilyOnUse:
    return FamilyOnUse([getattr(pattern, "backtracking", pattern)])


@dataclass(frozen=True)
class Prefilter:
    """A family's relaxed RE2 alternation, and its exact `regex` alternation."""

    any_of: regex.Pattern
    whole_text: bool
    relaxed: RelaxedFamily | None = None

    @staticmethod
    def of(patterns: Sequence[regex.Pattern]) -> Prefilter | None:
        """For patterns sharing their flags; None when they cannot form one alternation."""
        if not patterns or len({p.flags for p in patterns}) != 1:
            return None
        sources = [p.pattern for p in patterns]
        try:
            union = linear.compile("|".join(f"(?:{s})" for s in sources), patterns[0].flags)
        except regex.error:
            return None
        whole = not any(_CONTEXT_SENSITIVE.search(_CLASSES.sub("", s)) for s in sources)
        return Prefilter(union, whole, relaxed_family(patterns))

    def may_match_text(self, text: str) -> bool:
        """False only when no pattern can match any part of `text`."""
        if self.relaxed is not None and self.relaxed.regex is not None:
            return self.relaxed.may_match(text)
        return not self.whole_text or self.any_of.search(text) is not None

    def matches(self, passage: str) -> bool:
        """Whether any pattern matches `passage` (exact for every pattern)."""
        return self.any_of.search(passage) is not None
