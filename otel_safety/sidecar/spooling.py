"""Which spooled requests are still owed to the store: a record goes when its spans do.

The intake tracks each appended request with the spans in it; the store reports each batch
it wrote; a record whose every span has been written is released from the spool. Spans,
not traces: a request whose spans reach the engine after their trace's root (another
service's children, a late batch) waits there as a trace of its own, and the write of the
spans that came first must not release it. A span written before it was tracked cannot
happen: a request is tracked before its spans are handed to the engine.

A log request carrying GenAI events (the content of spans that carry none) is spooled too,
tagged, and owed by the traces its events belong to: it goes once each of them has been
written, or has been let go with no span to read its events with (the engine says so).
Replayed with the span requests, in the order they came, its events are back with their
traces after a crash.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence

from opentelemetry.sdk.trace import ReadableSpan

from otel_safety.pipeline import TraceEvaluation
from otel_safety.spool import Record, Spool

__all__ = ["LOG_REQUEST_TAG", "Owed", "spooled_log_request"]

# What a spooled log request starts with. No protobuf message starts with this byte (field
# 0, wire type 7: neither exists), so a trace request, the only record of older spools, never
# does, and both kinds share one spool.
LOG_REQUEST_TAG = b"\x07logs"


def spooled_log_request(payload: bytes) -> bytes | None:
    """The log request a spool record holds, or None when it holds a trace request."""
    return payload[len(LOG_REQUEST_TAG) :] if payload.startswith(LOG_REQUEST_TAG) else None


class Owed:
    """Records of the spool by the spans they still wait for, found by trace."""

    def __init__(self, spool: Spool) -> None:
        self.spool = spool
        self._lock = threading.Lock()
        self._by_trace: dict[int, set[Record]] = {}
        self._waiting: dict[Record, dict[int, set[int]]] = {}  # trace id -> span ids owed
        self._events_by_trace: dict[int, set[Record]] = {}  # log requests, by their traces
        self._events_waiting: dict[Record, set[int]] = {}  # log request -> traces owed

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

    def track_events(self, record: Record, trace_ids: Iterable[int]) -> None:
        """`record` (a log request) is released once each of these traces is written, or let
        go without spans (`events_done`)."""
        owed = set(trace_ids)
        if not owed:
            self.spool.release(record)
            return
        with self._lock:
            self._events_waiting[record] = owed
            for trace_id in owed:
                self._events_by_trace.setdefault(trace_id, set()).add(record)

    def events_done(self, trace_ids: Iterable[int], record: Record | None = None) -> None:
        """These traces' events need no keeping: written, let go with no span to read them
        with, or (for `record` alone) never taken by the engine."""
        with self._lock:
            done = self._events_done(trace_ids, record)
        for finished in done:
            self.spool.release(finished)

    def _events_done(self, trace_ids: Iterable[int], only: Record | None = None) -> list[Record]:
        done = []
        for trace_id in trace_ids:
            records = self._events_by_trace.get(trace_id)
            if not records:
                continue
            for record in [only] if only is not None else list(records):
                if record not in records:
                    continue
                records.discard(record)
                owed = self._events_waiting[record]
                owed.discard(trace_id)
                if not owed:
                    del self._events_waiting[record]
                    done.append(record)
            if not records:
                del self._events_by_trace[trace_id]
        return done

    def written(self, evaluations: Sequence[TraceEvaluation]) -> None:
        """The store wrote these spans (or quarantined their traces, counted)."""
        done: list[Record] = []
        with self._lock:
            if self._events_by_trace:  # log requests wait for some trace
                written = {span.context.trace_id for e in evaluations for span in e.spans}
                done.extend(self._events_done(written))
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
            return len(self._by_trace.keys() | self._events_by_trace.keys())


def _span_ids(spans: Iterable[ReadableSpan]) -> dict[int, set[int]]:
    """Span ids by trace id."""
    found: dict[int, set[int]] = {}
    for span in spans:
        found.setdefault(span.context.trace_id, set()).add(span.context.span_id)
    return found
