"""The DuckDB store written by the detection process, this process's own store as the net.

Inserting rows and checkpointing the file cost the application's process more CPU than
anything else left there once judging moved to a worker process (`bench/bench_app_overhead.py`
shows the CPU per span in each process). This sink sends each batch of annotated traces to
that worker, which writes them with its own `DuckDBStore`, and keeps the batch until the
worker says it is in the file. If the worker is lost (killed, stalled, never started), or
cannot open the store, every batch it had not written, and every batch after, is written
here by `local`, the same store class on the same file: a batch the worker did write is
written again, which leaves one copy (writes replace rows with the same keys).
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Sequence

from otel_safety.detection_worker import ProcessPipeline
from otel_safety.exporters.batching import WARNING_EVERY
from otel_safety.exporters.duckdb import DuckDBStore
from otel_safety.pipeline import TraceEvaluation
from otel_safety.rate_limited import RateLimitedLog

__all__ = ["WorkerStore"]

logger = logging.getLogger(__name__)


class WorkerStore:
    """An engine sink (`engine.Sink`): the store, written by the detection process."""

    def __init__(self, pipeline: ProcessPipeline, local: DuckDBStore) -> None:
        self.pipeline = pipeline
        self.local = local
        self._unwritten: deque[tuple[int, list[TraceEvaluation]]] = deque()  # by number
        self._held = 0  # traces in `_unwritten`
        self.forgotten = 0  # traces whose copy here was let go while the worker held them
        self.written_here = 0  # traces handed to `local`
        self.sent = 0  # traces handed to the worker
        self._lock = threading.Lock()
        self._warnings = RateLimitedLog(logger, window=WARNING_EVERY)

    @property
    def path(self) -> str:
        return self.local.path

    @property
    def keep_open(self) -> float:
        return self.local.keep_open

    def write(self, evaluations: Sequence[TraceEvaluation]) -> None:
        if not evaluations:
            return
        with self._lock:
            self._settle()
            number = self.pipeline.send_store(evaluations)
            if number is None:  # the worker cannot take them: written here, after the rest
                self._settle()
                self._write_here(evaluations)
                return
            self.sent += len(evaluations)
            self._unwritten.append((number, list(evaluations)))
            self._held += len(evaluations)
            self._bound()

    def tick(self) -> None:
        with self._lock:
            self._settle()
        self.local.tick()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        with self._lock:
            flushed = self.pipeline.flush_store(timeout_millis)
            self._settle()
        local = self.local.force_flush(timeout_millis)
        return local if flushed is None else flushed and local

    def shutdown(self) -> None:
        """After the engine closed the worker: what it had not written is written here."""
        with self._lock:
            self._settle()
        self.local.shutdown()

    def after_fork(self) -> None:
        """In a forked copy of the application: the batches kept are the parent's."""
        self._lock = threading.Lock()
        self._unwritten.clear()
        self._held = 0
        self.local.after_fork()

    def _settle(self) -> None:
        """Under the lock: let go of the batches the worker wrote; once it can take no more,
        hand the rest to `local`, oldest first."""
        written = self.pipeline.store_written
        while self._unwritten and self._unwritten[0][0] <= written:
            self._held -= len(self._unwritten.popleft()[1])
        if self._unwritten and not self.pipeline.writes_store:
            left = [evaluation for _, batch in self._unwritten for evaluation in batch]
            self._unwritten.clear()
            self._held = 0
            self._write_here(left)

    def _write_here(self, evaluations: Sequence[TraceEvaluation]) -> None:
        self.written_here += len(evaluations)
        self.local.write(evaluations)

    def _bound(self) -> None:
        """Keep no more copies than the store itself would hold: beyond that, while the
        worker cannot write the file (another process holds it), it alone keeps them."""
        while self._held > self.local.max_pending and len(self._unwritten) > 1:
            count = len(self._unwritten.popleft()[1])
            self._held -= count
            self.forgotten += count
            self._warnings.warning(
                "otel-safety store %s: the detection process cannot write it yet; this "
                "process keeps copies of its latest %d traces only (%d let go so far)",
                self.path,
                self._held,
                self.forgotten,
            )
