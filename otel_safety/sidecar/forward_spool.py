"""Forwarding through a spool on disk: a next hop that is down delays spans, never loses them.

Annotated spans are appended to a spool (batches of at most `batch_spans`, OTLP-encoded) and
a sender thread hands them to the standard exporter in order, one batch at a time; a batch
the hop did not take is retried after a growing pause (up to `max_backoff` seconds) until it
does. Nothing waits on the hop but the sender: the engine only appends. The spool is bounded
in bytes; when it is full, batches are counted as failed and logged. At a stop the sender
gets `flush_seconds` to send what is left; the rest stays on disk and is sent at the next
start.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from itertools import islice

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from otel_safety.otlp import spans_from_request
from otel_safety.pipeline import TraceEvaluation
from otel_safety.sidecar.metrics import Metrics, ProblemLog
from otel_safety.spool import Record, Spool, SpoolFull

logger = logging.getLogger("otel_safety.sidecar")

__all__ = ["SpooledForwarder"]

_MAX_TIMEOUT = 300.0  # seconds a slow next hop is waited for, at most (when rebuilt)


class SpooledForwarder:
    """An engine sink that keeps annotated spans on disk until the next hop has them."""

    def __init__(
        self,
        exporter: SpanExporter,
        spool: Spool,
        metrics: Metrics,
        problems: ProblemLog,
        *,
        batch_spans: int = 512,
        max_backoff: float = 30.0,
        flush_seconds: float = 5.0,
        remove_if_empty: bool = False,
        rebuild: Callable[[float], SpanExporter] | None = None,
        timeout: float | None = None,
    ) -> None:
        """`timeout`: seconds the exporter waits for an answer; `rebuild(seconds)` makes an
        exporter to the same hop that waits longer, for a hop slower than that."""
        self.exporter = exporter
        self.rebuild = rebuild
        self.timeout = timeout
        self.spool = spool
        self.remove_if_empty = remove_if_empty  # the folder goes at a stop that owes nothing
        self.metrics = metrics
        self.problems = problems
        self.batch_spans = batch_spans
        self.max_backoff = max_backoff
        self.flush_seconds = flush_seconds
        self._queue: deque[Record] = deque(record for record, _ in spool.leftovers())
        if self._queue:
            logger.warning(
                "otel-safety serve: %d batches an earlier run did not forward are sent first "
                "(spool %s)",
                len(self._queue),
                spool.folder,
            )
        self._cond = threading.Condition()
        self._stopping = False
        self._failing = False  # the last export failed: the next hop is down or refusing
        self._thread = threading.Thread(target=self._run, name="otel-safety-forward", daemon=True)
        self._thread.start()

    # -- the engine's side: append only -----------------------------------------------------
    def write(self, evaluations: Sequence[TraceEvaluation]) -> None:
        spans = [span for evaluation in evaluations for span in evaluation.spans]
        for start in range(0, len(spans), self.batch_spans):
            batch = spans[start : start + self.batch_spans]
            try:
                record = self.spool.append(encode_spans(batch).SerializeToString())
            except (SpoolFull, OSError) as exc:
                self.metrics.add("spans_forward_failed", len(batch))
                self.problems.warning(
                    "forward: %d spans not kept for the next hop: %s", len(batch), exc
                )
                continue
            with self._cond:
                self._queue.append(record)
                self._cond.notify_all()

    def tick(self) -> None:
        pass

    @property
    def waiting(self) -> int:
        """Batches on disk not yet taken by the next hop."""
        with self._cond:
            return len(self._queue)

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Wait for the next hop to take what is queued, while it takes it: a hop that is
        down is not waited for (the batches are on disk, sent when it is back)."""
        deadline = time.monotonic() + timeout_millis / 1000
        with self._cond:
            while self._queue and not self._failing and time.monotonic() < deadline:
                self._cond.wait(deadline - time.monotonic())
            return not self._queue

    def shutdown(self) -> None:
        self.force_flush(int(self.flush_seconds * 1000))
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self._thread.join(self.flush_seconds + 15)
        left = self.waiting
        self.spool.close(remove_if_empty=self.remove_if_empty)
        self.exporter.shutdown()
        if left:
            logger.warning(
                "otel-safety serve: %d batches not yet taken by the next hop stay in the spool "
                "%s and are sent at the next start",
                left,
                self.spool.folder,
            )

    # -- the sender ---------------------------------------------------------------------------
    def _run(self) -> None:
        pause = 0.5
        while True:
            with self._cond:
                while not self._queue and not self._stopping:
                    self._cond.wait()
                if not self._queue or self._stopping:
                    return  # stopping: what is left stays on disk
                waiting = len(self._queue)
                # A record holds a span or more: no batch takes more records than this.
                oldest = list(islice(self._queue, self.batch_spans))
            records, spans = self._next_batch(oldest)
            if not spans:
                continue
            started = time.monotonic()
            if self._export(spans):
                self.metrics.add("spans_forwarded", len(spans))
                if self._failing:
                    logger.warning(
                        "otel-safety forward: the next hop takes spans again; %d batches "
                        "still to send",
                        waiting - len(records),
                    )
                self._failing = False
                for record in records:
                    self._done(record)
                pause = 0.5
                continue
            self.metrics.add("spans_forward_retried", len(spans))
            self._after_failure(time.monotonic() - started, waiting)
            resume = time.monotonic() + pause  # new batches wake the condition: wait it out
            with self._cond:
                self._failing = True
                self._cond.notify_all()  # a flush waiting on the hop need wait no longer
                while not self._stopping and (left := resume - time.monotonic()) > 0:
                    self._cond.wait(left)
                if self._stopping:
                    return
            pause = min(pause * 2, self.max_backoff)

    def _next_batch(self, waiting: list[Record]) -> tuple[list[Record], list]:
        """The oldest batches, merged up to `batch_spans` spans: small requests spooled one by
        one would otherwise cost the hop one round trip each, and a backlog built during an
        outage would drain at that pace. An unreadable record is skipped, never retried."""
        records: list[Record] = []
        spans: list = []
        for record in waiting:
            try:
                payload = self.spool.read(record)
                found = spans_from_request(ExportTraceServiceRequest.FromString(payload))
            except Exception:  # unreadable: never block the queue on it
                logger.exception("otel-safety forward: spool record %s unreadable; skipped", record)
                if records:
                    break  # sent with what came before it first, skipped next time round
                self._done(record)
                return [], []
            if records and len(spans) + len(found) > self.batch_spans:
                break
            records.append(record)
            spans.extend(found)
        return records, spans

    def _after_failure(self, took: float, waiting: int) -> None:
        """Say once why the hop is not taking spans. A hop slower than the exporter's timeout
        would be asked again and again, receive the batch anew each time and answer too late
        each time: forwarding would stall for good. Its exporter is rebuilt to wait twice as
        long (up to `_MAX_TIMEOUT`), and the operator told."""
        slow = self.timeout is not None and took >= 0.9 * self.timeout
        if slow and self.rebuild is not None and self.timeout < _MAX_TIMEOUT:
            before, self.timeout = self.timeout, min(self.timeout * 2, _MAX_TIMEOUT)
            old, self.exporter = self.exporter, self.rebuild(self.timeout)
            old.shutdown()
            logger.warning(
                "otel-safety forward: the next hop did not answer within %.0f s; it may "
                "receive a batch more than once. Waiting up to %.0f s from now on; set "
                "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT (seconds) for a slow hop",
                before,
                self.timeout,
            )
        elif not self._failing:
            logger.warning(
                "otel-safety forward: the next hop is not taking spans%s; %d batches wait in "
                "the spool %s and are retried (nothing is lost unless the spool fills)",
                " in time (OTEL_EXPORTER_OTLP_TRACES_TIMEOUT)" if slow else "",
                waiting,
                self.spool.folder,
            )

    def _export(self, spans: list) -> bool:
        try:
            return self.exporter.export(spans) is SpanExportResult.SUCCESS
        except Exception:
            logger.exception("otel-safety forward: exporting %d spans failed", len(spans))
            return False

    def _done(self, record: Record) -> None:
        self.spool.release(record)
        with self._cond:
            if self._queue and self._queue[0] == record:
                self._queue.popleft()
            self._cond.notify_all()
