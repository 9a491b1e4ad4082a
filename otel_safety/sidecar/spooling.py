"""Which spooled requests are still owed to the store: a record goes when its spans do.

The intake tracks each appended request with the spans in it; the store reports each batch
it wrote; a record whose every span has been written is released from the spool. Spans,
not traces: a request whose spans reach the engine after their trace's root (another
service's children, a late batch) waits there as a trace of its own, and the write of the
spans that came first must not release it. A span written before it was tracked cannot
happen: a request is tracked before its spans are handed to the engine.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence

from opentelemetry.sdk.trace import ReadableSpan

from otel_safety.pipeline import TraceEvaluation
from otel_safety.spool import Record, Spool

__all__ = ["Owed"]


class Owed:
    """Records of the spool by the spans they still wait for, found by trace."""

    def __init__(self, spool: Spool) -> None:
        self.spool = spool
        self._lock = threading.Lock()
        self._by_trace: dict[int, set[Record]] = {}
        self._waiting: dict[Record, dict[int, set[int]]] = {}  # trace id -> span ids owed

    def track(self, record: Record, spans: Iterable[ReadableSpan]) -> None:
        """`record` is released once every one of `spans` has been written."""
        owed = _span_ids(spans)
        if not owed:
            self.spool.release(record)  # nothing in it the store will ever write
            return
        with self._lock:
            self._waiting[record] = owed
            for trace_id in owed:
                self._by_trace.setdefault(trace_id, set()).add(record)

    def written(self, evaluations: Sequence[TraceEvaluation]) -> None:
        """The store wrote these spans (or quarantined their traces, counted)."""
        done: list[Record] = []
        with self._lock:
            for evaluation in evaluations:
                for trace_id, span_ids in _span_ids(evaluation.spans).items():
                    records = self._by_trace.get(trace_id, set())
                    for record in list(records):
                        owed = self._waiting[record]
                        owed[trace_id] -= span_ids
                        if owed[trace_id]:
                            continue
                        del owed[trace_id]
                        records.discard(record)
                        if not owed:
                            del self._waiting[record]
                            done.append(record)
                    if not records:
                        self._by_trace.pop(trace_id, None)
        for record in done:
            self.spool.release(record)

    @property
    def traces(self) -> int:
        with self._lock:
            return len(self._by_trace)


def _span_ids(spans: Iterable[ReadableSpan]) -> dict[int, set[int]]:
    """Span ids by trace id."""
    found: dict[int, set[int]] = {}
    for span in spans:
        found.setdefault(span.context.trace_id, set()).add(span.context.span_id)
    return found
