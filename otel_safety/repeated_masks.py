"""Masking a trace's repeated histories once.

Each model call of a run resends the conversation so far, so a trace's `gen_ai.input.messages`
values are JSON arrays that extend one another, and masking each whole grows with the square
of the run (a 1,000-call run resends some 460 MB). A value that extends one masked earlier in
the trace (the same array with elements appended) is masked for its new elements only, the
earlier result reused, wherever that gives exactly what masking it whole gives: the secrets
around the seam are checked on both sides of it, and a secret reaching the end of what was
masked before (a private key without its end line) means masking the value whole.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from otel_safety.analysis.secrets import mask, masked_at, secret_spans
from otel_safety.mapping.history import KEPT, longest_extended

__all__ = ["RepeatedTextMasker"]

# Characters either side of a seam searched for a secret that crosses it: far longer than
# any token a pattern finds; a longer match can only be one that reached the end before.
SEAM = 512
SHORTEST = 4 * SEAM  # values shorter than this are masked whole: nothing to save


@dataclass(frozen=True)
class _Masked:
    """An array without its closing bracket, masked, and whether a secret reached its end."""

    body: str
    masked: str
    count: int
    open_end: bool


class RepeatedTextMasker:
    """`mask`, for the string values of one trace, reusing the masking of earlier arrays."""

    def __init__(self) -> None:
        self._masked: deque[_Masked] = deque(maxlen=KEPT)

    def mask(self, text: str) -> tuple[str, int]:
        """`text` with its secrets masked, and how many: as `analysis.secrets.mask` gives."""
        if len(text) < SHORTEST or not (text.startswith("[") and text.endswith("]")):
            return mask(text)
        body = text[:-1]
        earlier = longest_extended(text, self._masked)
        masked_body = None
        if earlier is not None:
            masked_body = _joined(earlier, body)
        if masked_body is None:
            masked_body = _whole(body)
        self._masked.append(masked_body)
        if masked_body.open_end or _bracket_counts(text):
            return mask(text)
        return masked_body.masked + "]", masked_body.count


def _whole(body: str) -> _Masked:
    spans = secret_spans(body)
    masked, count = masked_at(body, spans)
    return _Masked(body, masked, count, bool(spans) and spans[-1][1] == len(body))


def _joined(earlier: _Masked, body: str) -> _Masked | None:
    """`body` masked as the earlier array's masking plus its new part's, when the two agree
    with masking it whole around the seam; None when they may not."""
    seam = len(earlier.body)
    if earlier.open_end or seam < SEAM:
        return None
    added = body[seam:]
    around = secret_spans(body[seam - SEAM : seam + SEAM])
    apart = [*secret_spans(earlier.body[-SEAM:]), *_shifted(secret_spans(added[:SEAM]), SEAM)]
    inner = (SEAM // 2, SEAM + SEAM // 2)
    if _within(around, inner) != _within(apart, inner):
        return None  # a secret crosses the seam, or reads differently beside it
    rest = _whole(added)
    return _Masked(body, earlier.masked + rest.masked, earlier.count + rest.count, rest.open_end)


def _bracket_counts(text: str) -> bool:
    """Whether the closing bracket changes a secret found near the end (a short value that
    the bracket makes long enough, say)."""
    tail = text[-SEAM:]
    last = (SEAM // 2, SEAM)
    return _within(secret_spans(tail), last) != _within(secret_spans(tail[:-1]), last)


def _shifted(spans: list[tuple[int, int]], by: int) -> list[tuple[int, int]]:
    return [(start + by, end + by) for start, end in spans]


def _within(spans: list[tuple[int, int]], bounds: tuple[int, int]) -> list[tuple[int, int]]:
    """The spans that touch `bounds` (sorted): those whose reading the seam could change."""
    low, high = bounds
    return sorted(span for span in spans if span[1] > low and span[0] < high)
