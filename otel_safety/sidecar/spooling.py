"""Which spooled requests are still owed to the store: a record goes when its traces do.

The intake tracks each appended request with the traces its spans belong to; the store
reports each batch it wrote; a record whose every trace has been written is released from
the spool. A trace written before all its requests were tracked cannot happen: a request
is tracked before its spans are handed to the engine.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence

from otel_safety.pipeline import TraceEvaluation
from otel_safety.spool import Record, Spool

__all__ = ["Owed"]


class Owed:
    """Records of the spool by the traces they still wait for."""

    def __init__(self, spool: Spool) -> None:
        self.spool = spool
        self._lock = threading.Lock()
        self._by_trace: dict[str, set[Record]] = {}
        self._waiting: dict[Record, int] = {}

    def track(self, record: Record, trace_ids: Iterable[str]) -> None:
        """`record` is released once every one of `trace_ids` has been written."""
        traces = set(trace_ids)
        if not traces:
            self.spool.release(record)  # nothing in it the store will ever write
            return
        with self._lock:
            self._waiting[record] = len(traces)
            for trace_id in traces:
                self._by_trace.setdefault(trace_id, set()).add(record)

    def written(self, evaluations: Sequence[TraceEvaluation]) -> None:
        """The store wrote these traces (or quarantined them, counted)."""
        done: list[Record] = []
        with self._lock:
            for evaluation in evaluations:
                for record in self._by_trace.pop(evaluation.trace_id, ()):
                    self._waiting[record] -= 1
                    if self._waiting[record] <= 0:
                        del self._waiting[record]
                        done.append(record)
        for record in done:
            self.spool.release(record)

    @property
    def traces(self) -> int:
        with self._lock:
            return len(self._by_trace)
