"""Where an answer's sentences are, for detectors that judge it a sentence at a time.

A sentence ends at ".", "!" or "?" followed by whitespace, or at a line break (list items
and headings end without punctuation). Refusals and claims of done work are both read this
way, so a refusal sentence and a claim sentence are the same stretch of text.
"""

from __future__ import annotations

from otel_safety.analysis.memo import content_memo
from otel_safety.analysis.pattern_cache import compiled

__all__ = ["sentence_spans"]

_SENTENCE_END = compiled(r"(?<=[.!?])\s+|\n+")


@content_memo
def sentence_spans(text: str) -> tuple[tuple[int, int], ...]:
    """(start, end) of every non-empty sentence of `text`, in order."""
    spans: list[tuple[int, int]] = []
    start = 0
    for cut in _SENTENCE_END.finditer(text):
        if cut.start() > start:
            spans.append((start, cut.start()))
        start = cut.end()
    if start < len(text):
        spans.append((start, len(text)))
    return tuple(spans)
