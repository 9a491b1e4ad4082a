"""Judging on every core: several detection processes, each owning whole conversations.

`serve` and `ingest` judge far more traces than one core can. A batch of released traces is
split by conversation and each part goes to one `ProcessPipeline` child; all parts are sent
before any answer is read, so the children judge at the same time. A conversation always
goes to the same child (its key hashed: `gen_ai.conversation.id` and the other
conversation attributes, else the trace id), so the monitors' per-conversation memory,
the guard's call history and the escalation history stay whole, as with one process.

A child that cannot start or dies leaves its share to this process's own pipeline, as
`ProcessPipeline` does: no trace is lost, only the parallelism.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Callable, Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan

from otel_safety.config import Settings
from otel_safety.detection_worker import ProcessPipeline
from otel_safety.logs import LogEvent
from otel_safety.mapping import conversation_of
from otel_safety.pipeline import Pipeline, TraceEvaluation, TraceInput

__all__ = ["WorkerPool", "default_workers"]

Batch = Sequence[TraceInput]


def default_workers() -> int:
    """One detection process per core this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


class WorkerPool:
    """A `Pipeline` stand-in for the engine that judges in `workers` child processes."""

    def __init__(self, settings: Settings, fallback: Pipeline, workers: int) -> None:
        if workers < 1:
            raise ValueError(f"workers must be at least 1, got {workers}")
        self._local = fallback
        self._conversation_keys = fallback.conversation_keys
        self.workers = [ProcessPipeline(settings, fallback) for _ in range(workers)]

    @property
    def in_process(self) -> bool:
        """True once every child has fallen back to this process."""
        return all(worker.in_process for worker in self.workers)

    def after_fork(self) -> None:
        for worker in self.workers:
            worker.after_fork()

    @property
    def detectors(self) -> list:
        return self._local.detectors

    @property
    def policy(self) -> Any:
        return self._local.policy

    def warm(self) -> None:
        """Start every child; they build their detectors side by side."""
        for worker in self.workers:
            worker.warm()

    def in_force(self) -> list[tuple[str, str | None]]:
        """The detectors and monitor modes in force (every child builds the same)."""
        return self.workers[0].in_force()

    def build_error(self) -> str | None:
        """Wait for every child's detectors: the first build error, or None."""
        errors = [error for worker in self.workers if (error := worker.build_error())]
        return errors[0] if errors else None

    def evaluate(
        self,
        spans: Sequence[ReadableSpan],
        reason: str = "root_ended",
        events: Sequence[LogEvent] = (),
    ) -> TraceEvaluation:
        return self.evaluate_many([(spans, reason, events)])[0]

    def evaluate_many(self, traces: Batch) -> list[TraceEvaluation]:
        return self.start(traces)()

    def start(self, traces: Batch) -> Callable[[], list[TraceEvaluation]]:
        """Send each child its share now; the returned call collects the evaluations in
        the order of `traces`. It must be made: the children are held until then."""
        shares: dict[int, list[int]] = {}
        for number, trace in enumerate(traces):
            shares.setdefault(self.worker_of(trace[0]), []).append(number)
        started: list[tuple[list[int], Callable[[], list[TraceEvaluation]]]] = []
        try:
            for worker, numbers in shares.items():
                share = [traces[n] for n in numbers]
                started.append((numbers, self.workers[worker].start(share)))
        except BaseException:
            for _, collect in started:  # release the children already sent a share
                collect()
            raise

        def collect() -> list[TraceEvaluation]:
            results: list[TraceEvaluation | None] = [None] * len(traces)
            failure: BaseException | None = None
            for numbers, collect_share in started:  # each share, or its child stays held
                try:
                    for number, evaluation in zip(numbers, collect_share(), strict=True):
                        results[number] = evaluation
                except BaseException as exc:
                    failure = failure or exc
            if failure is not None:
                raise failure
            return results  # type: ignore[return-value]  # every slot is filled above

        return collect

    def worker_of(self, spans: Sequence[ReadableSpan]) -> int:
        """The child that judges this trace: the same for every trace of a conversation."""
        key = conversation_of(spans, self._conversation_keys)
        return zlib.crc32(key.encode("utf-8", "replace")) % len(self.workers)

    def close(self) -> None:
        for worker in self.workers:
            worker.close()
