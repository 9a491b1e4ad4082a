"""What both transports share: decode, admit or refuse as a whole, submit, count.

A request is admitted only if all its spans fit in the engine's queue right now; otherwise
it is refused whole with a retryable status, so the client's retry carries the same spans
and nothing is half-accepted. Spans that cannot be read (unusable ids) are dropped from an
admitted request and reported as OTLP partial success.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan

from otel_safety.buffer import roots_last
from otel_safety.engine import SafetyEngine
from otel_safety.logs import LogEvent
from otel_safety.otlp import spans_from_request
from otel_safety.otlp_logs import (
    ExportLogsServiceRequest,
    log_events_from_request,
    log_record_count,
)
from otel_safety.sidecar.metrics import Metrics, ProblemLog
from otel_safety.sidecar.spooling import LOG_REQUEST_TAG, Owed, spooled_log_request
from otel_safety.spool import Record, SpoolFull

MAX_MESSAGE_PROBLEMS = 5


class Refusal(Enum):
    """Why a whole request was refused; each transport maps it to its own status."""

    INVALID = "invalid"  # cannot be decoded: never retry
    UNAUTHENTICATED = "unauthenticated"  # missing or wrong bearer token
    TOO_LARGE = "too_large"  # over the size limit, or more spans than the queue holds
    SATURATED = "saturated"  # the pipeline is behind: retry after a pause
    DRAINING = "draining"  # shutting down: retry, ideally against another instance
    UNSUPPORTED = "unsupported"  # HTTP only: content type or encoding we do not read

    @property
    def retryable(self) -> bool:
        return self in (Refusal.SATURATED, Refusal.DRAINING)


class Refused(Exception):
    def __init__(self, refusal: Refusal, message: str) -> None:
        super().__init__(message)
        self.refusal = refusal
        self.message = message


@dataclass(frozen=True)
class Admitted:
    accepted: int
    rejected: int
    message: str  # empty when every span was accepted


def span_count(request: ExportTraceServiceRequest) -> int:
    return sum(
        len(scope.spans) for resource in request.resource_spans for scope in resource.scope_spans
    )


class Intake:
    """Admission control in front of `SafetyEngine.submit`."""

    def __init__(
        self,
        engine: SafetyEngine,
        capacity: int,
        metrics: Metrics,
        problems: ProblemLog,
        owed: Owed | None = None,
        max_bytes: int = 256 << 20,
        store_backlogged: Callable[[], bool] = lambda: False,
    ) -> None:
        self.engine = engine
        self.store_backlogged = store_backlogged
        self.max_bytes = max_bytes  # request bytes handed to the engine and not yet taken
        self._queued: deque[tuple[int, int]] = deque()  # (spans submitted after, its bytes)
        self._queued_bytes = 0
        self._bytes_lock = threading.Lock()
        self.owed = owed  # the write-ahead spool: an admitted request is on disk first
        self.capacity = capacity
        self.metrics = metrics
        self.problems = problems
        self._lock = threading.Lock()
        self._submitted = 0
        self.draining = False
        # Where received log records go on, besides the GenAI events read from them.
        self.forward_logs: Callable[[ExportLogsServiceRequest], None] | None = None
        # Once log records arrive, traces wait this long after their root for the records
        # naming their spans (traces and logs come in separate requests, in either order).
        self.log_wait = 0.0

    def waiting(self) -> int:
        """Spans handed to the engine that its worker has not taken yet."""
        return max(0, self._submitted - self.engine.stats["spans_received"])

    def waiting_bytes(self) -> int:
        """Bytes of the requests whose spans the worker has not all taken yet."""
        taken = self.engine.stats["spans_received"]
        with self._bytes_lock:
            while self._queued and self._queued[0][0] <= taken:
                self._queued_bytes -= self._queued.popleft()[1]
            return self._queued_bytes

    def refuse(
        self, refusal: Refusal, message: str, transport: str, peer: str, spans: int
    ) -> Refused:
        """Count and log a refusal; the caller raises or answers with it."""
        self.metrics.add("requests", transport=transport, outcome=refusal.value)
        self.metrics.add("spans_received", spans)
        self.metrics.add("spans_rejected", spans, reason=refusal.value)
        self.problems.warning(
            "%s request from %s refused (%s): %s", transport, peer, refusal.value, message
        )
        return Refused(refusal, message)

    def _spool(
        self,
        request: ExportTraceServiceRequest,
        spans: list[ReadableSpan],
        transport: str,
        peer: str,
        total: int,
    ) -> None:
        """Append the request to the spool (on disk before it is acknowledged) and track
        the traces it owes the store; a spool that cannot take it refuses the request."""
        assert self.owed is not None
        record = self._append(request.SerializeToString(), "request", transport, peer, total)
        self.owed.track(record, spans)

    def _append(self, payload: bytes, what: str, transport: str, peer: str, total: int) -> Record:
        """Put a request on disk before it is acknowledged; one the spool cannot take is
        refused, retryably."""
        assert self.owed is not None
        try:
            return self.owed.spool.append(payload)
        except (SpoolFull, OSError) as exc:
            raise self.refuse(
                Refusal.SATURATED,
                f"cannot spool the {what} before acknowledging it: {exc}",
                transport,
                peer,
                total,
            ) from exc

    def _submit_events(self, events: list[LogEvent], record: Record | None) -> int:
        """Hand GenAI events to the engine, their spooled `record` owed by their traces
        until written; the events taken."""
        if record is not None:
            assert self.owed is not None
            self.owed.track_events(record, {event.trace_id for event in events})
        self.engine.buffer.log_wait = self.log_wait  # a float: read by the worker as it is
        submitted = 0
        taken = dict.fromkeys((event.trace_id for event in events), False)
        for event in events:
            if self.engine.submit(event):
                submitted += 1
                taken[event.trace_id] = True
        if record is not None:  # a trace none of whose events the engine took owes nothing
            assert self.owed is not None
            self.owed.events_done([t for t, took in taken.items() if not took], record)
        return submitted

    def replay(self, record: Record, payload: bytes) -> int:
        """Hand a request left in the spool by an earlier run to the engine (waiting for
        room in its queue); the spans (or, for a log request, the GenAI events) submitted."""
        assert self.owed is not None
        logs = spooled_log_request(payload)
        if logs is not None:
            events = log_events_from_request(ExportLogsServiceRequest.FromString(logs))
            while self.engine.room_for_events() < len(events) <= self.capacity:
                time.sleep(0.01)
            submitted = self._submit_events(events, record)
            self.metrics.add("log_events_replayed", submitted)
            return submitted
        request = ExportTraceServiceRequest.FromString(payload)
        spans = spans_from_request(request, [])
        self.owed.track(record, spans)
        while self.waiting() + len(spans) > self.capacity and len(spans) <= self.capacity:
            time.sleep(0.01)
        with self._lock:
            submitted = sum(self.engine.submit(span) for span in roots_last(spans))
            self._submitted += submitted
        self.metrics.add("spans_replayed", submitted)
        return submitted

    def admit(
        self,
        request: ExportTraceServiceRequest,
        transport: str,
        peer: str,
        dropped: tuple[int, list[str]] = (0, []),
    ) -> Admitted:
        """Submit the request's usable spans, or raise `Refused` for the whole request.
        `dropped`: the spans of the client's request already left out as unreadable, and
        why (the answer's partial success counts them)."""
        total = span_count(request) + dropped[0]
        if self.draining:
            raise self.refuse(
                Refusal.DRAINING, "the receiver is shutting down", transport, peer, total
            )
        problems: list[str] = list(dropped[1])
        spans = spans_from_request(request, problems)
        if len(spans) > self.capacity:
            raise self.refuse(
                Refusal.TOO_LARGE,
                f"{len(spans)} spans in one request, more than the pipeline queue holds "
                f"({self.capacity}); send smaller batches or raise OTEL_SAFETY_QUEUE_SIZE",
                transport,
                peer,
                total,
            )
        size = request.ByteSize()
        with self._lock:
            if self.waiting() + len(spans) > self.capacity:
                raise self.refuse(
                    Refusal.SATURATED,
                    f"pipeline queue full ({self.waiting()} of {self.capacity} spans waiting)",
                    transport,
                    peer,
                    total,
                )
            if self.store_backlogged():
                raise self.refuse(
                    Refusal.SATURATED,
                    "the store cannot be written now (is another process holding it?); "
                    "what was taken is kept in the spool",
                    transport,
                    peer,
                    total,
                )
            if self.waiting_bytes() and self.waiting_bytes() + size > self.max_bytes:
                raise self.refuse(
                    Refusal.SATURATED,
                    f"pipeline queue full ({self.waiting_bytes()} of {self.max_bytes} bytes "
                    "waiting)",
                    transport,
                    peer,
                    total,
                )
            if self.owed is not None:
                self._spool(request, spans, transport, peer, total)
            submitted = sum(self.engine.submit(span) for span in roots_last(spans))
            self._submitted += submitted
            with self._bytes_lock:
                self._queued.append((self._submitted, size))
                self._queued_bytes += size
        unreadable = total - len(spans)
        lost = len(spans) - submitted  # only when the engine closed between check and submit
        rejected = unreadable + lost
        self.metrics.add("requests", transport=transport, outcome="partial" if rejected else "ok")
        self.metrics.add("spans_received", total)
        self.metrics.add("spans_accepted", submitted)
        self.metrics.add("spans_rejected", unreadable, reason="invalid_span")
        self.metrics.add("spans_rejected", lost, reason=Refusal.DRAINING.value)
        message = ""
        if rejected:
            parts = problems[:MAX_MESSAGE_PROBLEMS]
            if len(problems) > MAX_MESSAGE_PROBLEMS:
                parts.append(f"and {len(problems) - MAX_MESSAGE_PROBLEMS} more")
            if lost:
                parts.append(f"{lost} spans arrived while the receiver was shutting down")
            message = f"{rejected} of {total} spans rejected: " + "; ".join(parts)
            self.problems.warning("%s request from %s: %s", transport, peer, message)
        elif problems:
            # Accepted whole, but something was dropped inside a span (a bad link): say so.
            message = "accepted with problems: " + "; ".join(problems[:MAX_MESSAGE_PROBLEMS])
            self.problems.warning("%s request from %s: %s", transport, peer, message)
        return Admitted(submitted, rejected, message)

    def admit_logs(self, request: ExportLogsServiceRequest, transport: str, peer: str) -> int:
        """Hand the request's GenAI events to the engine, to be read with their spans, and
        pass every record on to the next hop; the records accepted.

        Log records are never refused for a busy pipeline: an event the engine's queue has
        no room for is dropped and counted (`log_events_dropped`), and the record still goes
        on. Only a draining receiver refuses, so the client retries elsewhere, or a spool
        that cannot take a request carrying GenAI events, so the client retries later.
        """
        total = log_record_count(request)
        if self.draining:
            raise self.refuse(Refusal.DRAINING, "the receiver is shutting down", transport, peer, 0)
        events = log_events_from_request(request)
        record = None
        if self.owed is not None and events:  # their content is judged: on disk first
            payload = LOG_REQUEST_TAG + request.SerializeToString()
            record = self._append(payload, "log request", transport, peer, 0)
        submitted = self._submit_events(events, record)
        if self.forward_logs is not None:
            try:
                self.forward_logs(request)
            except Exception as exc:  # what we could read is judged; the client is not failed
                self.metrics.add("log_records_forward_failed", total)
                self.problems.warning(
                    "%s log request from %s: cannot forward its records: %s", transport, peer, exc
                )
        self.metrics.add("log_requests", transport=transport, outcome="ok")
        self.metrics.add("log_records_received", total)
        self.metrics.add("log_events_accepted", submitted)
        self.metrics.add("log_events_dropped", len(events) - submitted)
        return total
