"""Hashed word n-grams: the features the learned judges read, in training and in production.

One function turns a text into feature ids, so a judge trained by `judges.train` sees
exactly what it sees when it runs. Words are lower-cased runs of letters, digits and
apostrophes; a judge reads unigrams and bigrams of a window of the text (its opening, and
optionally its end), each prefixed with the field it came from, hashed into a fixed space
with CRC-32 (stable across processes and Python versions, unlike `hash`). A judge may also
read character n-grams of the window's letters and digits run together, lower-cased, so
that words split by odd spacing, dots or casing ("I g n o r e", "IgNoRe") still meet the
same features. Linear in the window, whatever the input.
"""

from __future__ import annotations

import itertools
import zlib
from dataclasses import dataclass

from otel_safety.analysis.memo import content_memo
from otel_safety.analysis.pattern_cache import compiled

__all__ = ["FeatureSpec", "char_ids", "feature_ids", "words"]

_WORD = compiled(r"[\p{L}\p{N}']+")
_NOT_ALNUM = compiled(r"[^\p{L}\p{N}]+")


@dataclass(frozen=True)
class FeatureSpec:
    """Which part of a field a judge reads, and how big its hashed space is."""

    field: str
    head: int = 1_000  # characters read from the start
    tail: int = 0  # and from the end (a long answer's conclusion)
    bits: int = 18
    chars: int = 0  # length of the character n-grams read too (0: words only)

    @property
    def size(self) -> int:
        return 1 << self.bits


def window(text: str, head: int, tail: int) -> str:
    """The stretch of `text` a judge reads: its first `head` and last `tail` characters."""
    if len(text) <= head + tail:
        return text
    return text[:head] + ("\n" + text[-tail:] if tail else "")


@content_memo
def words(text: str) -> tuple[str, ...]:
    """Lower-cased word tokens (curly apostrophes straightened)."""
    return tuple(_WORD.findall(text.replace("\u2019", "'").lower()))


def feature_ids(text: str | None, spec: FeatureSpec) -> set[int]:
    """The hashed unigram and bigram ids of the window of `text` that `spec` reads."""
    tokens = words(window(text or "", spec.head, spec.tail))
    mask = spec.size - 1
    prefix = spec.field + ":"
    ids = {zlib.crc32((prefix + token).encode()) & mask for token in tokens}
    ids.update(
        zlib.crc32(f"{prefix}{first} {second}".encode()) & mask
        for first, second in itertools.pairwise(tokens)
    )
    if not tokens:
        ids.add(zlib.crc32(f"{prefix}<empty>".encode()) & mask)
    if spec.chars:
        ids.update(char_ids(text or "", spec))
    return ids


@content_memo
def _letters(text: str) -> str:
    return _NOT_ALNUM.sub("", text.lower())


def char_ids(text: str, spec: FeatureSpec) -> set[int]:
    """The hashed character n-gram ids of the window's letters and digits, run together."""
    run = _letters(window(text, spec.head, spec.tail))
    n, mask = spec.chars, spec.size - 1
    seed, crc = zlib.crc32((spec.field + "#").encode()), zlib.crc32
    grams = {run[i : i + n] for i in range(len(run) - n + 1)}
    return {crc(gram.encode(), seed) & mask for gram in grams}
