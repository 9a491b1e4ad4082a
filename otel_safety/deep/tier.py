"""The deep tier: a bounded queue and worker threads, behind the engine's first verdicts.

The engine hands every exported batch to `offer`, which only picks candidates and puts
them in a bounded queue without waiting (a full queue drops the trace and counts it).
Worker threads ask the model, turn the answer into a `deep_analysis` finding, re-decide
the trace's level with the escalation policy, and hand the `DeepResult` to every sink that
has a `write_deep` method (the DuckDB store, the evaluation log records). The same tier
runs in an application (configure()), in `serve` and in `ingest`: `build_engine` adds it.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TextIO

from otel_safety.annotate import local_root
from otel_safety.config import Settings
from otel_safety.deep.client import DeepClient, Outcome
from otel_safety.deep.finding import DeepResult, decide_with, deep_finding
from otel_safety.deep.names import COUNTERS
from otel_safety.deep.select import Selector
from otel_safety.deep.settings import DeepConfig
from otel_safety.mapping import span_id_hex
from otel_safety.model import EscalationLevel, Finding, Trajectory
from otel_safety.pipeline import TraceEvaluation
from otel_safety.policy import Policy
from otel_safety.rate_limited import RateLimitedLog

logger = logging.getLogger(__name__)
WARNING_EVERY = 10.0


@dataclass
class _Job:
    """What an analysis needs of a trace (not its spans: the queue holds only these)."""

    trajectory: Trajectory
    findings: list[Finding]
    level: EscalationLevel
    why: str
    root: tuple[int, int, int] | None  # trace id, span id, end time of the root span


def _job(evaluation: TraceEvaluation, why: str) -> _Job:
    assert evaluation.trajectory is not None
    root = local_root(evaluation.spans)
    ids = None
    if root is not None:
        ids = (root.context.trace_id, root.context.span_id, root.end_time or root.start_time or 0)
    return _Job(evaluation.trajectory, list(evaluation.findings), evaluation.level, why, ids)


class DeepTier:
    def __init__(
        self,
        settings: Settings,
        config: DeepConfig,
        sinks: Sequence[object],
        policy: Policy,
        stats: Counter[str] | None = None,
        *,
        client: DeepClient | None = None,
        selector: Selector | None = None,
        select: Callable[[TraceEvaluation], str | None] | None = None,
    ) -> None:
        """`sinks` is read at each delivery (the engine's own list, so sinks added later
        receive results too). `select` replaces the selector's choice of candidates (the
        evaluation judges every agent run); budgets and sampling still apply."""
        self.config = config
        self.sinks = sinks
        self.policy = policy
        self.stats: Counter[str] = stats if stats is not None else Counter()
        self.client = client or DeepClient(config)
        self.selector = selector or Selector(settings)
        self._select = select or self.selector.why
        self._concurrency = settings.deep_concurrency
        self._queue: queue.Queue[_Job | None] = queue.Queue(maxsize=settings.deep_queue_size)
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._busy = 0  # jobs taken and not yet delivered
        self._threads: list[threading.Thread] = []
        self._closed = False
        self._abandoned = False  # shutdown stopped waiting: later results go nowhere
        # When the first trace was queued and the last analysis delivered (monotonic): the
        # elapsed time `eval --deep` reports.
        self.first_queued: float | None = None
        self.last_done: float | None = None
        self._drop_warnings = RateLimitedLog(logger, window=WARNING_EVERY)
        self._failure_warnings = RateLimitedLog(logger, window=WARNING_EVERY)

    # -- engine side: never blocks ---------------------------------------------------------
    def offer(self, evaluations: Sequence[TraceEvaluation]) -> int:
        """Queue the candidates among these exported traces; how many were queued."""
        queued = 0
        for evaluation in evaluations:
            if evaluation.trajectory is None or self._closed:
                continue
            why = self._select(evaluation)
            if why is None:
                continue
            self._count("deep_candidates")
            skipped = self.selector.admit()
            if skipped is not None:
                self._count(f"deep_{skipped}")
                continue
            self._start()
            try:
                self._queue.put_nowait(_job(evaluation, why))
            except queue.Full:
                self.selector.refund()  # the model will not be asked: no budget spent
                self._dropped()
                continue
            self._count("deep_queued")
            if self.first_queued is None:
                self.first_queued = time.monotonic()
            queued += 1
        return queued

    @property
    def pending(self) -> int:
        """Traces queued or being analysed."""
        with self._lock:
            return self._queue.qsize() + self._busy

    def flush(self, timeout_millis: int = 30_000) -> bool:
        """Wait until every queued trace is analysed and delivered (or the timeout)."""
        deadline = time.monotonic() + timeout_millis / 1000
        with self._idle:
            while self._queue.unfinished_tasks:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._idle.wait(min(left, 0.5))
        return True

    def shutdown(self, timeout_millis: int = 30_000) -> None:
        """Finish what is queued within the timeout, count what is not, stop the threads."""
        finished = self.flush(timeout_millis)
        self._closed = True
        if not finished:
            left = 0
            while True:  # what is still queued will not be analysed: count it
                try:
                    job = self._queue.get_nowait()
                except queue.Empty:
                    break
                if job is not None:
                    left += 1
                self._queue.task_done()
            self._abandoned = True  # the ones still with the model are not written either
            self._count("deep_unfinished_at_shutdown", left + self._busy)
            logger.error(
                "otel-safety deep analysis: %d traces left unanalysed at shutdown (timeout %d ms)",
                left + self._busy,
                timeout_millis,
            )
        for _ in self._threads:
            try:
                self._queue.put_nowait(None)
            except queue.Full:
                break
        for thread in self._threads:
            thread.join(0.1 if not finished else 5)
        self._deliver([])  # the final counters (drops included) for `status`

    def wait(self, progress: TextIO | None = None, label: str = "deep analysis") -> None:
        """Wait for every queued analysis however long it takes (a command that reads a
        whole set: `ingest`, `eval --deep`), saying now and then how many are left."""
        last = time.monotonic()
        while not self.flush(1000):
            if progress is not None and time.monotonic() - last >= 5:
                last = time.monotonic()
                progress.write(f"{label}: {self.pending} traces still to analyse\n")
                progress.flush()

    # -- workers ----------------------------------------------------------------------------
    def _start(self) -> None:
        """Threads start with the first candidate: an unused tier costs nothing."""
        if self._threads:
            return
        with self._lock:
            if self._threads:
                return
            for number in range(self._concurrency):
                thread = threading.Thread(
                    target=self._run, name=f"otel-safety-deep-{number}", daemon=True
                )
                thread.start()
                self._threads.append(thread)

    def _run(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                self._queue.task_done()
                return
            with self._lock:
                self._busy += 1
            try:
                self._analyse(job)
            except Exception:  # a worker must survive anything
                self._count("deep_errors")
                logger.exception("otel-safety deep analysis failed on a trace")
            finally:
                with self._idle:
                    self.last_done = time.monotonic()
                    self._busy -= 1
                    self._queue.task_done()
                    self._idle.notify_all()

    def _analyse(self, job: _Job) -> None:
        outcome = self.client.analyse(job.trajectory, job.findings)
        self._account(outcome)
        result = self._result(job.trajectory, job.findings, job.level, outcome, job.why)
        if job.root is not None:
            result.root_trace_id, result.root_span_int, result.root_end_ns = job.root
            result.root_span_id = result.root_span_id or span_id_hex(job.root[1])
        self._deliver([result])

    def _result(
        self,
        trajectory: Trajectory,
        findings: Sequence[Finding],
        level_before: EscalationLevel,
        outcome: Outcome,
        why: str,
    ) -> DeepResult:
        result = DeepResult(
            trace_id=trajectory.trace_id,
            root_span_id=trajectory.root_span_id,
            trajectory=trajectory,
            model=self.config.model,
            prompt_version=self.config.prompt.version,
            outcome=outcome,
            why=why,
            level_before=level_before,
            level=level_before,
            detectors_fired=sorted({f.detector for f in findings if f.detected}),
        )
        if outcome.reply is None:
            self._count("deep_errors")
            self._failed(result.trace_id, outcome.error)
            return result
        finding = deep_finding(
            outcome, trajectory, trajectory.root_span_id, result.model, result.prompt_version
        )
        result.finding = finding
        result.level, result.by_policy = decide_with(
            self.policy, findings, finding, trajectory, level_before
        )
        if finding.detected:
            result.detectors_fired = sorted({*result.detectors_fired, finding.detector})
        self._count("deep_analysed")
        self._count("deep_raised", int(result.raised))
        return result

    def counters(self) -> dict[str, int]:
        """The tier's counters now (every one, zeros included)."""
        with self._lock:
            return {name: self.stats[name] for name in COUNTERS}

    def _deliver(self, results: list[DeepResult]) -> None:
        if results and self._abandoned:  # counted as unfinished; the sinks are closed
            return
        counters = self.counters()
        for sink in list(self.sinks):
            write = getattr(sink, "write_deep", None)
            if write is None:
                continue
            try:
                keep = getattr(sink, "write_deep_counters", None)
                if keep is not None:  # first: written in the same pass as the results
                    keep(counters)
                write(results)
            except Exception:
                self._count("deep_sink_errors")
                logger.exception("otel-safety sink %r failed to write deep results", sink)

    def _account(self, outcome: Outcome) -> None:
        self.selector.spent(outcome.tokens)
        self._count("deep_calls", outcome.calls)
        self._count("deep_tokens", outcome.tokens)
        self._count("deep_milliseconds", round(outcome.seconds * 1000))

    def _count(self, name: str, value: int = 1) -> None:
        if value:
            with self._lock:
                self.stats[name] += value

    def _failed(self, trace_id: str, error: str | None) -> None:
        """Say so at most every WARNING_EVERY seconds: a dead endpoint must not flood the log
        (every failure is in `deep_runs` and counted)."""
        self._failure_warnings.warning(
            "otel-safety deep analysis of trace %s failed: %s (%d failures so far)",
            trace_id,
            error,
            self.stats["deep_errors"],
        )

    def _dropped(self) -> None:
        self._count("deep_dropped")
        self._drop_warnings.warning(
            "otel-safety deep analysis queue full (%d traces): %d candidates dropped so "
            "far; raise OTEL_SAFETY_DEEP_QUEUE_SIZE or lower the budget",
            self._queue.maxsize,
            self.stats["deep_dropped"],
        )
