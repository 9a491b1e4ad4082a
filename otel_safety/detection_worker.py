"""Judging in a worker process, so detection never holds the observed application's GIL.

In the application, the engine's thread sends each batch of released traces (their spans,
as plain tuples) to a child Python process and gets back each trace's `Judgement`; it only
annotates the spans and hands them to the sinks. The child runs the same `Pipeline`, built
from the same settings, with the conversation state of every monitor.

When the app writes a DuckDB store, the child writes it too (`writes_store`): the engine's
`WorkerStore` sink sends each batch of annotated traces back to the child, which writes them
through its own `DuckDBStore` and says, in each later answer, up to which batch they are in
the file; the app keeps every batch until then and writes them itself if the child is lost.
Writing the store was most of the CPU judging in a child still left in the app's process.
A trace the engine has not changed since it came back (most of them) is not sent back at
all: the batch names it, and the child annotates the spans it judged the same way
(`ChildCopy`); pickling traces back was then a third of the app's CPU per span.

The child is a plain `python -m otel_safety.detection_child` (never the application's own
entry point, which `multiprocessing` would import again). It reads length-prefixed pickles
on stdin and answers on stdout; it exits when its stdin closes, so it dies with the
application. If it cannot start, dies or stalls, the engine logs it once and judges on its
own thread from then on: the data is never lost, only the isolation.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import logging
import os
import pickle
import signal
import struct
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import IO, TYPE_CHECKING, Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from otel_safety.config import Settings, env_name
from otel_safety.guard.signing import key_for_children
from otel_safety.logs import LogEvent
from otel_safety.mapping.log_events import with_log_events
from otel_safety.model import EscalationLevel, Finding, Trajectory
from otel_safety.pipeline import (
    Judgement,
    Pipeline,
    PipelineClosed,
    TraceEvaluation,
    TraceInput,
    finish,
)

if TYPE_CHECKING:
    from otel_safety.exporters.duckdb import DuckDBStore

logger = logging.getLogger(__name__)

__all__ = [
    "ProcessPipeline",
    "evaluation_from_wire",
    "evaluation_to_wire",
    "span_from_wire",
    "span_to_wire",
]

START_TIMEOUT = 120.0  # seconds for the child to import and compile its detectors
BATCH_TIMEOUT = 120.0  # seconds for one batch before the child is taken for stalled
_HEADER = struct.Struct("!Q")

Wire = tuple[Any, ...]


# -- spans as plain data ------------------------------------------------------------------


def span_to_wire(span: ReadableSpan) -> Wire:
    """What the pipeline reads of a span, as picklable tuples (SDK spans hold locks)."""
    context = span.context
    parent = span.parent
    scope = span.instrumentation_scope
    return (
        span.name,
        context.trace_id,
        context.span_id,
        None if parent is None else (parent.trace_id, parent.span_id, parent.is_remote),
        span.kind.value,
        span.start_time,
        span.end_time,
        dict(span.attributes or {}),
        [(e.name, e.timestamp, dict(e.attributes or {})) for e in span.events],
        [
            (link.context.trace_id, link.context.span_id, dict(link.attributes or {}))
            for link in span.links
        ],
        (span.status.status_code.value, span.status.description),
        dict(span.resource.attributes) if span.resource is not None else {},
        None if scope is None else (scope.name, scope.version),
    )


def span_from_wire(wire: Wire) -> ReadableSpan:
    (
        name,
        trace_id,
        span_id,
        parent,
        kind,
        start,
        end,
        attributes,
        events,
        links,
        status,
        resource,
        scope,
    ) = wire
    sampled = TraceFlags(TraceFlags.SAMPLED)
    return ReadableSpan(
        name=name,
        context=SpanContext(trace_id, span_id, is_remote=False, trace_flags=sampled),
        parent=None
        if parent is None
        else SpanContext(parent[0], parent[1], is_remote=parent[2], trace_flags=sampled),
        resource=Resource(resource),
        attributes=attributes,
        events=[Event(e_name, e_attributes, e_time) for e_name, e_time, e_attributes in events],
        links=[
            Link(SpanContext(l_trace, l_span, is_remote=True), l_attributes)
            for l_trace, l_span, l_attributes in links
        ],
        kind=SpanKind(kind),
        status=Status(StatusCode(status[0]), status[1]),
        start_time=start,
        end_time=end,
        instrumentation_scope=None if scope is None else InstrumentationScope(*scope),
    )


def evaluation_to_wire(evaluation: TraceEvaluation) -> dict[str, Any]:
    """An annotated trace as the store needs it, its spans as plain tuples."""
    fields = {item.name: getattr(evaluation, item.name) for item in dataclasses.fields(evaluation)}
    fields["spans"] = [span_to_wire(span) for span in evaluation.spans]
    fields["child_copy"] = None
    return fields


@dataclasses.dataclass(frozen=True)
class ChildCopy:
    """Which trace of which judged batch an evaluation is, in the child that judged it, and
    what it was made of then. The child annotates that trace for its store just as this
    process did (`finish`), so a batch for the store names it instead of carrying it back;
    once the engine has changed it (raised to its run's verdict, secrets masked, a halt
    set), it travels whole."""

    child: int  # which child process (a new one holds nothing of the last one's)
    batch: int
    index: int
    spans: list[ReadableSpan]
    findings: list[Finding]
    trajectory: Trajectory | None
    level: EscalationLevel

    def still(self, evaluation: TraceEvaluation) -> bool:
        return (
            evaluation.spans is self.spans
            and evaluation.findings is self.findings
            and evaluation.trajectory is self.trajectory
            and evaluation.level == self.level
            and evaluation.run is None
            and evaluation.halt is None
        )


def evaluation_from_wire(fields: dict[str, Any]) -> TraceEvaluation:
    return TraceEvaluation(**{**fields, "spans": [span_from_wire(w) for w in fields["spans"]]})


# -- framing ------------------------------------------------------------------------------


def _send(stream: IO[bytes], message: Any) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_HEADER.pack(len(data)) + data)
    stream.flush()


def _receive(stream: IO[bytes]) -> Any:
    header = stream.read(_HEADER.size)
    if len(header) < _HEADER.size:
        raise EOFError("the other side closed the pipe")
    (size,) = _HEADER.unpack(header)
    data = stream.read(size)
    if len(data) < size:
        raise EOFError("the other side closed the pipe mid-message")
    return pickle.loads(data)


# -- the application's side ---------------------------------------------------------------


# Detection processes a forked copy of the application inherited from its parent.
_PARENTS_CHILDREN: list[subprocess.Popen[bytes]] = []


class ProcessPipeline:
    """A `Pipeline` stand-in for the engine: judging happens in a child process."""

    def __init__(self, settings: Settings, fallback: Pipeline, writes_store: bool = False) -> None:
        """`fallback`: the same pipeline in this process (lazy: it compiles nothing unless
        the child cannot judge). `writes_store`: the child opens the settings' DuckDB store
        and writes what `send_store` hands it (`exporters/worker_store.py`)."""
        self._settings = settings
        self._local = fallback
        self._asks_store = writes_store
        self._store_error: str | None = None  # why the child could not open the store
        self._store_sent = 0  # the number of the last batch sent to the child's store
        self.store_written = 0  # ... and of the last one the child says is in the file
        self._child: subprocess.Popen[bytes] | None = None
        self._ready = False  # the child said its detectors are built
        self._failed = False
        self._build_error: str | None = None  # the child's, when its data would not compile
        self._closed = False  # no child is started once the engine has shut down
        self._in_force: list[tuple[str, str | None]] = []  # the child's detectors, when built
        self._children = 0  # children started: which one holds the batches it judged
        self._judge_sent = 0  # the number of the last batch the child was sent to judge
        self.stored_by_reference = 0  # traces handed to the child's store by `ChildCopy`
        self._lock = threading.Lock()

    @property
    def in_process(self) -> bool:
        """True once judging has fallen back to this process."""
        return self._failed

    @property
    def asks_store(self) -> bool:
        """The child is asked to open the store (it may not manage: `writes_store`)."""
        return self._asks_store

    @property
    def writes_store(self) -> bool:
        """The child is judging and has the store open: batches for the store go to it."""
        usable = self._ready and not self._failed and not self._closed and self._child is not None
        return self._asks_store and usable and self._store_error is None

    @property
    def store_error(self) -> str | None:
        return self._store_error

    def send_store(self, evaluations: Sequence[TraceEvaluation]) -> int | None:
        """Hand annotated traces to the child's store; the batch's number (`store_written`
        reaches it once they are in the file), or None when the child cannot take them."""
        with self._lock:
            child = self._child
            if not self.writes_store or child is None or child.stdin is None:
                return None
            try:
                items = [self._store_item(evaluation) for evaluation in evaluations]
                _send(child.stdin, ("store", self._store_sent + 1, items))
            except Exception as exc:
                self._give_up(f"the detection process failed: {type(exc).__name__}: {exc}")
                return None
            self._store_sent += 1
            return self._store_sent

    def _store_item(self, evaluation: TraceEvaluation) -> dict[str, Any] | tuple[int, int]:
        """The trace for the child's store: where the child holds it, if unchanged since."""
        held = evaluation.child_copy
        kept = held is not None and held.batch > self._judge_sent - _JudgedBatches.KEPT
        if kept and held.child == self._children and held.still(evaluation):
            self.stored_by_reference += 1
            return (held.batch, held.index)
        return evaluation_to_wire(evaluation)

    def flush_store(self, timeout_millis: int) -> bool | None:
        """Have the child write everything it holds; whether it did within the time, or
        None when the child cannot be asked."""
        with self._lock:
            child = self._child
            if not self.writes_store or child is None or child.stdin is None:
                return None
            stdout = child.stdout
            assert stdout is not None
            try:
                _send(child.stdin, ("flush", timeout_millis))
                answer = _with_timeout(lambda: _receive(stdout), timeout_millis / 1000 + 5)
                kind, flushed, written = answer
                if kind != "flushed":
                    raise ValueError(f"answered {kind!r} to a flush")
            except Exception as exc:
                self._give_up(f"the detection process failed: {type(exc).__name__}: {exc}")
                return None
            self.store_written = written
            return bool(flushed)

    def after_fork(self) -> None:
        """In a forked copy of the application: the child process and its pipes are the
        parent's (kept from the collector, whose closing them could flush the parent's
        bytes into them); this copy starts its own child when it first judges."""
        if self._child is not None:
            _PARENTS_CHILDREN.append(self._child)
        self._child = None
        self._ready = False
        self._lock = threading.Lock()
        self._store_sent = self.store_written = 0
        self._local.after_fork()

    @property
    def detectors(self) -> list:
        return self._fallback().detectors

    @property
    def policy(self) -> Any:
        return self._fallback().policy

    def warm(self) -> None:
        """Start the child, which builds its detectors meanwhile; its readiness is awaited
        by the first batch, so a shutdown right after start-up never waits for it."""
        with self._lock:
            self._start_child()

    def evaluate(
        self,
        spans: Sequence[ReadableSpan],
        reason: str = "root_ended",
        events: Sequence[LogEvent] = (),
    ) -> TraceEvaluation:
        return self.evaluate_many([(spans, reason, events)])[0]

    def evaluate_many(self, traces: Sequence[TraceInput]) -> list[TraceEvaluation]:
        return self.start(traces)()

    def start(self, traces: Sequence[TraceInput]) -> Callable[[], list[TraceEvaluation]]:
        """Send `traces` to the child now and return the call that collects their
        evaluations; several children judge at once when each is started before any is
        collected (`detection_pool`). The call must be made: the child is held until then."""
        self._lock.acquire()
        try:
            sent = self._send_batch(traces)
            child, batch = self._children, self._judge_sent
        except BaseException:
            self._lock.release()
            raise

        def collect() -> list[TraceEvaluation]:
            try:
                judgements = self._receive_batch(len(traces)) if sent else None
            finally:
                self._lock.release()
            if judgements is None:
                if self._closed:  # the child was stopped by a shutdown past its deadline
                    raise PipelineClosed(f"{len(traces)} traces were with the stopped child")
                return self._fallback().evaluate_many(traces)
            evaluations = []
            for index, (trace, judgement) in enumerate(zip(traces, judgements, strict=True)):
                events = trace[2] if len(trace) > 2 else ()
                evaluation = finish(trace[0], judgement, self._local.span_events, events)
                if self._asks_store and not events:  # judged as the child holds it
                    evaluation.child_copy = ChildCopy(
                        child,
                        batch,
                        index,
                        evaluation.spans,
                        evaluation.findings,
                        evaluation.trajectory,
                        evaluation.level,
                    )
                evaluations.append(evaluation)
            return evaluations

        return collect

    def in_force(self) -> list[tuple[str, str | None]]:
        """The child's detectors and monitor modes, without building them here too."""
        with self._lock:
            if self._ensure_child():
                return list(self._in_force)
        return self._fallback().in_force()

    def build_error(self) -> str | None:
        """Wait until the child has built its detectors; the error that stopped it (a bad
        data file, say), or None: built, or the child could not run at all and this
        process judges instead. For callers that must not judge without every detector."""
        with self._lock:
            self._ensure_child()
            return self._build_error

    def close(self) -> None:
        self._closed = True
        idle = self._lock.acquire(blocking=False)
        try:
            child, self._child = self._child, None
        finally:
            if idle:
                self._lock.release()
        if child is None:
            return
        if not idle:
            # A batch is still with the child and the caller's time is up (a shutdown
            # past its deadline): stop the child now rather than wait for its answer. The
            # thread waiting for it judges that batch here instead; serve's spool keeps
            # whatever is not written by then for the next start.
            child.kill()
            child.wait()
            return
        # No request is in flight and the child keeps nothing worth saving, so it need not
        # finish compiling its detectors to exit: end its input, and stop it if it does not
        # go at once (shutdown stays fast).
        try:
            child.stdin.close()
            child.wait(timeout=0.5)
        except Exception:
            child.terminate()
            try:
                child.wait(timeout=2)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()

    # -- internals --------------------------------------------------------------------------
    def _send_batch(self, traces: Sequence[TraceInput]) -> bool:
        if not self._ensure_child():
            return False
        child = self._child
        assert child is not None and child.stdin is not None
        try:
            # Log events travel inside the judging copies of their spans, as span events.
            wires = [_trace_to_wire(trace) for trace in traces]
            _send(child.stdin, ("judge", self._judge_sent + 1, wires))
            self._judge_sent += 1
        except Exception as exc:
            self._give_up(f"the detection process failed: {type(exc).__name__}: {exc}")
            return False
        return True

    def _receive_batch(self, count: int) -> list[Judgement] | None:
        child = self._child
        if child is None or child.stdout is None:
            return None
        stdout = child.stdout
        try:
            answer = _with_timeout(lambda: _receive(stdout), BATCH_TIMEOUT)
        except Exception as exc:
            self._give_up(f"the detection process failed: {type(exc).__name__}: {exc}")
            return None
        judged = isinstance(answer, tuple) and isinstance(answer[0], list)
        if not judged or len(answer[0]) != count:
            self._give_up(f"the detection process answered {type(answer).__name__}")
            return None
        judgements, self.store_written = answer
        return judgements

    def _ensure_child(self) -> bool:
        """A running child whose detectors are built, or False (judging falls back here)."""
        if not self._start_child():
            return False
        if self._ready:
            return True
        assert self._child is not None and self._child.stdout is not None
        stdout = self._child.stdout
        try:
            ready = _with_timeout(lambda: _receive(stdout), START_TIMEOUT)
        except Exception as exc:
            self._give_up(f"the detection process did not start: {type(exc).__name__}: {exc}")
            return False
        if not (isinstance(ready, tuple) and ready[:1] == ("ready",)):
            if self._build_error is None:
                # A detector's data does not compile: a command stops on it (`build_error`),
                # an app judges on without that detector, in a new child: not in its own
                # process, whose GIL the child is there to spare.
                self._build_error = str(ready)
                logger.error(
                    "otel-safety: %s; in an app the other detectors judge on without it, a "
                    "command (serve, ingest) stops",
                    ready,
                )
                self._stop_child()
                return self._ensure_child()
            self._give_up(f"the detection process could not build its detectors: {ready}")
            return False
        self._ready = True
        self._in_force = list(ready[1])
        self._store_error = ready[2]
        if self._asks_store and self._store_error is not None:
            logger.warning(
                "otel-safety: the detection process cannot write the store (%s); the "
                "application's process writes it",
                self._store_error,
            )
        return True

    def _start_child(self) -> bool:
        if self._failed or self._closed:
            return False
        if self._child is not None:
            if self._child.poll() is None:
                return True
            self._give_up(f"the detection process exited with code {self._child.returncode}")
            return False
        try:
            settings, env = _for_the_child(self._settings)
            self._children += 1
            self._judge_sent = 0
            self._child = subprocess.Popen(
                [sys.executable, "-m", "otel_safety.detection_child"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                env=env,
            )
            assert self._child.stdin is not None
            _send(self._child.stdin, (settings, self._build_error is not None, self._asks_store))
        except _OnlyHere as exc:
            self._give_up(str(exc))
            return False
        except Exception as exc:
            self._give_up(f"the detection process did not start: {type(exc).__name__}: {exc}")
            return False
        self._ready = False
        return True

    def _give_up(self, why: str) -> None:
        """Judge on the engine's thread from now on; say so once. (Once closed, nothing is
        judged any more: a child lost then is no reason to judge here.)"""
        self._failed = True
        if self._closed:
            logger.debug("otel-safety: %s after shutdown", why)
        else:
            logger.error("otel-safety: %s; judging in the application's process from now on", why)
        self._stop_child()

    def _stop_child(self) -> None:
        child, self._child = self._child, None
        self._ready = False
        if child is not None:
            child.kill()
            child.wait()

    def _fallback(self) -> Pipeline:
        return self._local


class _OnlyHere(Exception):
    """The settings name detectors that only this process can build."""


def _for_the_child(settings: Settings) -> tuple[Settings, dict[str, str]]:
    """The settings and environment a detection process is started with: told to import the
    modules of the users' detectors registered here, and to search the folders they came
    from. A detector the app's `__main__` defines cannot be built there (`_OnlyHere`)."""
    from otel_safety.detectors import registry

    keys = registry.check(settings.detectors, settings.thresholds)
    if only_here := registry.main_detectors(keys):
        raise _OnlyHere(
            f"detector(s) {', '.join(only_here)} are defined in the application's __main__, "
            "which a detection process cannot import; to judge off the application's "
            "process, move them into a module of their own"
        )
    plugins = list(dict.fromkeys([*settings.plugins, *registry.plugin_modules()]))
    env = {**os.environ, env_name("detection"): "thread", **key_for_children()}
    if paths := registry.plugin_paths():
        env["PYTHONPATH"] = os.pathsep.join([*paths, *filter(None, [env.get("PYTHONPATH")])])
    return settings.model_copy(update={"plugins": plugins}), env


def _trace_to_wire(trace: TraceInput) -> tuple[list[Wire], str]:
    spans, reason, *events = trace
    return [span_to_wire(s) for s in with_log_events(spans, events[0] if events else ())], reason


def _with_timeout(read: Callable[[], Any], seconds: float) -> Any:
    """`read()` on a helper thread, or TimeoutError once `seconds` pass."""
    result: list[Any] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            result.append(read())
        except BaseException as exc:
            failure.append(exc)

    reader = threading.Thread(target=run, name="otel-safety-detection-read", daemon=True)
    reader.start()
    reader.join(seconds)
    if reader.is_alive():
        raise TimeoutError(f"no answer within {seconds:.0f} s")
    if failure:
        raise failure[0]
    return result[0]


# -- the child's side ---------------------------------------------------------------------


# Allocations between young collections, then young and middle collections between older
# ones (CPython's defaults: 700, 10, 10).
COLLECTOR_THRESHOLDS = (10_000, 20, 20)


def tune_collector() -> None:
    """Set a judging process's garbage collector for judging, once its detectors are built.

    Most of the heap is their compiled data, kept for good: frozen, it is no longer walked by
    every full collection. A trace's judging makes many short-lived objects, so young
    collections come less often. Only for a process of ours: an app's collector is the
    app's. `bench/bench_detection.py` measures with and without."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*COLLECTOR_THRESHOLDS)


def lower_priority(steps: int) -> None:
    """Run this process `steps` nice levels below where it started: judging is background
    work, and on a machine with fewer free cores than busy threads the application's must
    win them. Where the system has no nice levels (Windows), judging runs alike."""
    if steps <= 0 or not hasattr(os, "nice"):
        return
    with contextlib.suppress(OSError):  # a sandbox that forbids it: judge at the same priority
        os.nice(steps)


class _ChildStore:
    """The store as the child writes it: which of the batches the app sent are in the file.

    The `DuckDBStore` writes what it holds all at once, oldest first, at most once a second
    (and on a tick, which a thread of its own gives it while no batch comes); a batch is done
    once every trace up to its last is written, or dropped by the store's bound."""

    TICK = 1.0  # seconds between two ticks
    LAST_WRITE_MILLIS = 10_000  # how long the last write may wait for the file

    def __init__(self, store: DuckDBStore, judged: _JudgedBatches) -> None:
        self.store = store
        self.judged = judged
        self._ends: deque[tuple[int, int]] = deque()  # (batch number, traces up to its end)
        self._received = 0
        self._written = 0
        self.done = 0  # the last batch in the file
        store.on_written.append(self._count)
        threading.Thread(target=self._tick, name="otel-safety-store-tick", daemon=True).start()

    def write(self, number: int, items: list[dict[str, Any] | tuple[int, int]]) -> None:
        evaluations = [
            self.judged.evaluation(*item) if isinstance(item, tuple) else evaluation_from_wire(item)
            for item in items
        ]
        self._received += len(evaluations)
        self._ends.append((number, self._received))
        self.store.write(evaluations)

    def written(self) -> int:
        settled = self._written + self.store.dropped
        while self._ends and self._ends[0][1] <= settled:
            self.done = self._ends.popleft()[0]
        return self.done

    def close(self) -> None:
        """The app closed the pipe: write what is held, then let go of the file. After a
        clean shutdown nothing is held; if the app died, this saves what it had sent, and
        says how many traces it could not write. (An app shutting down waits for this only
        briefly: what is still held, it writes.)"""
        self.store.force_flush(self.LAST_WRITE_MILLIS)
        self.store.shutdown()  # one last try, then the count of what is lost, if any

    def _count(self, evaluations: Sequence[TraceEvaluation]) -> None:
        self._written += len(evaluations)

    def _tick(self) -> None:
        while True:
            time.sleep(self.TICK)
            try:
                self.store.tick()
            except Exception:
                logger.exception("otel-safety: the detection process's store failed on tick")


class _JudgedBatches:
    """The traces of the last batches this child judged, with their judgements, for the
    store batches that name them (`ChildCopy`). The app hands a batch to the store as soon as
    it has it back, while the child judges the next one, so a few suffice; it names none
    older than these (the pipe keeps the order, so it knows which they are)."""

    KEPT = 8

    def __init__(self, span_events: bool) -> None:
        self.span_events = span_events
        self._batches: dict[int, tuple[list[list[ReadableSpan]], list[Judgement]]] = {}

    def keep(self, number: int, traces: list[list[ReadableSpan]], judged: list[Judgement]) -> None:
        self._batches[number] = (traces, judged)
        while len(self._batches) > self.KEPT:
            del self._batches[next(iter(self._batches))]

    def evaluation(self, batch: int, index: int) -> TraceEvaluation:
        """The trace annotated as the app annotated it (`finish`, on the same spans)."""
        traces, judged = self._batches[batch]
        return finish(traces[index], judged[index], self.span_events)


def _open_store(
    settings: Settings, judged: _JudgedBatches
) -> tuple[_ChildStore | None, str | None]:
    """The settings' store, opened here; or why not (the app then writes it itself)."""
    from otel_safety.exporters.duckdb import DuckDBStore

    try:
        store = DuckDBStore(settings.db_path, keep_open=settings.store_keep_open)
    except Exception as exc:
        return None, f"{type(exc).__name__}: {exc}"
    return _ChildStore(store, judged), None


def main() -> None:
    """Read settings, build the pipeline, then judge batches until stdin closes."""
    from otel_safety.bootstrap import build_pipeline, detector_left_out

    # Ctrl-C in a terminal reaches every process of the app's group: the app decides what
    # it means (its shutdown still flushes through this process), so it is not ours to act on.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    source, sink = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # stray prints must not corrupt the answers
    try:
        settings, lenient, writes_store = _receive(source)
        lower_priority(settings.detection_nice)
        pipeline = build_pipeline(
            settings, on_detector_error=detector_left_out if lenient else None
        )
        pipeline.warm()
        judged_batches = _JudgedBatches(pipeline.span_events)
        store, store_error = _open_store(settings, judged_batches) if writes_store else (None, None)
        tune_collector()
    except EOFError:
        return
    except Exception as exc:
        _send(sink, f"{type(exc).__name__}: {exc}")
        return
    try:
        _send(sink, ("ready", pipeline.in_force(), store_error))
        while True:
            try:
                message = _receive(source)
            except EOFError:
                if store is not None:
                    store.close()
                return
            kind = message[0]
            if kind == "judge":
                traces = [
                    ([span_from_wire(w) for w in spans], reason) for spans, reason in message[2]
                ]
                judged = [pipeline.judge(spans, reason) for spans, reason in traces]
                if store is not None:
                    judged_batches.keep(message[1], [spans for spans, _ in traces], judged)
                _send(sink, (judged, store.written() if store is not None else 0))
            elif kind == "store" and store is not None:
                store.write(message[1], message[2])
            elif kind == "flush":
                flushed = store.store.force_flush(message[1]) if store is not None else True
                _send(sink, ("flushed", flushed, store.written() if store is not None else 0))
    except BrokenPipeError:  # the app is gone (it exited without closing us): so are we,
        return  # quietly: a traceback here lands on the user's terminal after their app
