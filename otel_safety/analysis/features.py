"""Hashed word n-grams: the features the learned judges read, in training and in production.

One function turns a text into feature ids, so a judge trained by `judges.train` sees
exactly what it sees when it runs. Words are lower-cased runs of letters, digits and
apostrophes; a judge reads unigrams and bigrams of a window of the text (its opening, and
optionally its end), each prefixed with the field it came from, hashed into a fixed space
with CRC-32 (stable across processes and Python versions, unlike `hash`). Linear in the
window, whatever the input.
"""

from __future__ import annotations

import itertools
import zlib
from dataclasses import dataclass

import regex

from otel_safety.analysis.memo import per_trace

__all__ = ["FeatureSpec", "feature_ids", "words"]

_WORD = regex.compile(r"[\p{L}\p{N}']+")


@dataclass(frozen=True)
class FeatureSpec:
    """Which part of a field a judge reads, and how big its hashed space is."""

    field: str
    head: int = 1_000  # characters read from the start
    tail: int = 0  # and from the end (a long answer's conclusion)
    bits: int = 18

    @property
    def size(self) -> int:
        return 1 << self.bits


def window(text: str, head: int, tail: int) -> str:
    """The stretch of `text` a judge reads: its first `head` and last `tail` characters."""
    if len(text) <= head + tail:
        return text
    return text[:head] + ("\n" + text[-tail:] if tail else "")


@per_trace
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
    return ids
