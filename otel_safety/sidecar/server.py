"""The sidecar as one object: sinks, the shared engine, both receivers, and an orderly stop."""

from __future__ import annotations

import logging
import os
import ssl
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc
from opentelemetry.sdk.trace.export import SpanExporter

from otel_safety.approvals.store import ApprovalStore
from otel_safety.bootstrap import build_engine, detectors_ready, stream_workers
from otel_safety.config import Settings, read_named_file
from otel_safety.engine import SafetyEngine, Sink
from otel_safety.exporters.duckdb import DuckDBStore
from otel_safety.exporters.otlp_spans import timeout_from_env
from otel_safety.halts import HaltSink
from otel_safety.own_metrics import OwnMetrics
from otel_safety.sidecar.forward import forward_sink, otlp_exporter
from otel_safety.sidecar.forward_logs import LogForwarder, otlp_log_exporter
from otel_safety.sidecar.forward_spool import SpooledForwarder
from otel_safety.sidecar.grpc_server import TraceService, build_server
from otel_safety.sidecar.http_server import HttpOptions, OtlpHttpServer
from otel_safety.sidecar.intake import Intake
from otel_safety.sidecar.metrics import PREFIX, FlagCounter, Metrics, ProblemLog, observe_engine
from otel_safety.sidecar.spooling import Owed, spooled_log_request
from otel_safety.spool import Record, Spool, SpoolBusy

if TYPE_CHECKING:
    from otel_safety.exporters.ducklake import DuckLakeStore

logger = logging.getLogger("otel_safety.sidecar")
# Seconds past the drain a stop waits for the flush to return before it leaves it behind.
_STOP_SLACK = 0.5


@dataclass
class SidecarOptions:
    """How the receivers listen and where annotated spans go besides the store."""

    host: str = "127.0.0.1"
    grpc_port: int | None = 4317  # None: no gRPC receiver; 0: any free port
    http_port: int | None = 4318  # None: no HTTP receiver; 0: any free port
    token: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    max_request_bytes: int = 20 * 1024 * 1024
    retry_after: float = 2.0
    read_timeout: float = 10.0
    body_timeout: float = 30.0
    max_connections: int = 256
    # OTLP/HTTP requests decoded at once (see `HttpOptions.decoders`), and how long one waits.
    decoders: int = field(default_factory=lambda: max(2, os.cpu_count() or 2))
    decode_wait: float = 10.0
    grpc_workers: int = 8
    forward_endpoint: str | None = None
    forward_protocol: str = "grpc"
    forward_headers: Mapping[str, str] = field(default_factory=dict)
    lake: str | None = None
    lake_data_path: str | None = None
    drain_timeout: float = 30.0
    # Write-ahead spool of acknowledged requests: a folder, "off", or None for the default
    # (`<store>.spool` beside a DuckDB file; none for an in-memory store or a lake).
    spool: str | None = None
    spool_max_bytes: int = 1 << 30
    # Request bytes handed to the pipeline and not yet taken, at most (beyond: retryable refusal).
    queue_max_bytes: int = 256 << 20
    # Where annotated spans wait for the next hop (same rules; `<store>.forward` by default).
    forward_spool: str | None = None


class Sidecar:
    """Build with settings and options, `start()`, and `stop()` (or use it as a context).

    `stop()` refuses new requests (503 / UNAVAILABLE), lets requests in progress finish,
    then has the engine judge every buffered trace and flush the store and the forwarder,
    so everything that was acknowledged to a client is written and sent on.
    """

    def __init__(
        self, settings: Settings, options: SidecarOptions, extra_sinks: Sequence[Sink] = ()
    ) -> None:
        if options.grpc_port is None and options.http_port is None:
            raise ValueError("both receivers are off: enable gRPC, HTTP or both")
        if bool(options.tls_cert) != bool(options.tls_key):
            raise ValueError("TLS needs both a certificate and a key file")
        self.settings = settings
        self.options = options
        self.metrics = Metrics(OwnMetrics(PREFIX))
        self.problems = ProblemLog()
        self._tls = _read_tls(options)  # fail on unreadable files before anything starts
        store = Path(settings.db_path)
        self._new_store = bool(settings.store and not options.lake and not store.exists())
        sinks: list[Sink] = []
        self._store_sink: DuckDBStore | DuckLakeStore | None = None
        self.spool: Spool | None = None
        self.forward_spool: Spool | None = None
        owed: Owed | None = None
        self._halt_sink: HaltSink | None = None
        if settings.store:
            if not options.lake:  # first: the store records the halts its verdicts set
                halting = self._halt_sink = HaltSink(on=settings.halt_on, in_process=False)
                sinks.append(halting)
                self.metrics.own.observe_counter(
                    "halts_without_conversation",
                    "traces whose verdict would halt their conversation but that name none "
                    "(gen_ai.conversation.id)",
                    lambda: halting.stats["halts_without_conversation"],
                )
            store_sink = self._store_sink = self._store()
            sinks.append(store_sink)
            self.spool = self._spool_or_nothing_left(options.spool, "spool", sinks)
            if self.spool is not None:
                owed = Owed(self.spool)
                store_sink.on_written.append(owed.written)
                store_sink.drop_overflow = False  # the intake pushes back instead
        if options.forward_endpoint:

            def exporter_for(timeout: float) -> SpanExporter:
                return otlp_exporter(
                    options.forward_endpoint,  # type: ignore[arg-type]
                    options.forward_protocol,
                    options.forward_headers,
                    timeout,
                )

            timeout = timeout_from_env()
            exporter = exporter_for(timeout)
            self.forward_spool = self._spool_or_nothing_left(
                options.forward_spool, "forward", sinks
            )
            if self.forward_spool is not None:
                sinks.append(
                    SpooledForwarder(
                        exporter,
                        self.forward_spool,
                        self.metrics,
                        self.problems,
                        remove_if_empty=options.forward_spool is None,  # beside the store
                        rebuild=exporter_for,
                        timeout=timeout,
                    )
                )
            else:
                sinks.append(forward_sink(exporter, self.metrics))
            self.log_forwarder: LogForwarder | None = LogForwarder(
                otlp_log_exporter(
                    options.forward_endpoint, options.forward_protocol, options.forward_headers
                ),
                self.metrics,
                evaluations=settings.evaluation_events != "spans",
                redact=settings.redact_secrets,
            )
            sinks.append(self.log_forwarder)
        else:
            self.log_forwarder = None
        sinks.append(FlagCounter(self.metrics))
        sinks.extend(extra_sinks)
        engine: SafetyEngine | None = None
        try:
            engine = build_engine(
                settings, sinks, detection="process", workers=stream_workers(settings)
            )
            detectors_ready(engine)
        except Exception:  # a bad data folder or policy: leave no empty store behind
            if engine is not None:
                engine.shutdown()  # and its sinks with it
            for sink in sinks if engine is None else ():
                sink.shutdown()
            self._discard_new_store()
            raise
        self.engine = engine
        if owed is not None:
            engine.on_events_let_go.append(owed.events_done)
        observe_engine(self.metrics, engine.stats)
        self.intake = Intake(
            self.engine,
            settings.queue_size,
            self.metrics,
            self.problems,
            owed,
            max_bytes=options.queue_max_bytes,
            store_backlogged=self._store_backlogged,
        )
        if self.log_forwarder is not None:
            self.intake.forward_logs = self.log_forwarder.forward
        self.intake.log_wait = settings.log_wait
        self.engine.buffer.content_wait = settings.log_wait  # before any log record came
        self._grpc: grpc.Server | None = None
        self._http: OtlpHttpServer | None = None
        self._http_thread: threading.Thread | None = None
        self.grpc_port: int | None = None
        self.http_port: int | None = None
        self._started = time.monotonic()
        self._stopped = False
        self._flushed = True
        for name, (_, about) in self._gauges().items():
            self.metrics.own.observe_gauge(name, about, self._gauge_reader(name))

    def _gauge_reader(self, name: str):
        return lambda: self._gauges()[name][0]

    def _store_backlogged(self) -> bool:
        """With a spool, a store that cannot keep up makes the receivers push back."""
        return (
            self.spool is not None
            and self._store_sink is not None
            and (self._store_sink.backlogged)
        )

    def _spool_or_nothing_left(
        self, asked: str | None, kind: str, sinks: list[Sink]
    ) -> Spool | None:
        """`_open_spool`, or, when it cannot be had, a start that leaves no new store (and no
        other spool) behind, and an error that names the option."""
        try:
            return self._open_spool(asked, kind)
        except (OSError, SpoolBusy) as exc:
            for sink in sinks:
                sink.shutdown()
            self._discard_new_store()
            option = "--spool" if kind == "spool" else "--forward-spool"
            raise ValueError(
                f"cannot use a {kind} folder: {exc}; name a writable folder with {option} "
                f"DIR (or {option} off)"
            ) from exc

    def _open_spool(self, asked: str | None, kind: str) -> Spool | None:
        """A spool: the folder asked for, or the first free one beside the store (two
        serves on one store each get their own, and a crashed one's is picked up by the
        next serve that finds it free); none for "off", an in-memory store or a lake."""
        if asked == "off":
            return None
        if asked:
            return Spool(asked, max_bytes=self.options.spool_max_bytes)
        if not self.settings.store or self.options.lake or self.settings.db_path == ":memory:":
            return None
        base = f"{self.settings.db_path}.{kind}"
        folders = [base if number == 1 else f"{base}-{number}" for number in range(1, 17)]
        for folder in folders:
            try:
                spool = Spool(folder, max_bytes=self.options.spool_max_bytes)
            except SpoolBusy:
                continue
            _adopt_free_folders(spool, [f for f in folders if f != folder])
            return spool
        raise SpoolBusy(f"every {kind} folder beside {self.settings.db_path} is in use")

    def replay(self) -> int:
        """Judge the requests an earlier run acknowledged but did not write; the spans.
        In the order they came, as they were judged live: a log request's events then meet
        their spans within a few requests, and each request waits for room in the queue,
        so none is dropped."""
        if self.spool is None:
            return 0
        spans = events = records = 0
        for record, payload in self.spool.leftovers():
            taken = self._replay(record, payload)
            if taken is None:
                continue
            records += 1
            if spooled_log_request(payload) is None:
                spans += taken
            else:
                events += taken
        if records:
            logger.warning(
                "otel-safety serve: queued again for judging %d spans (and %d GenAI events "
                "sent as log records) of %d requests acknowledged by an earlier run and not "
                "yet written (spool %s); new requests wait behind them",
                spans,
                events,
                records,
                self.spool.folder,
            )
        return spans

    def _replay(self, record: Record, payload: bytes) -> int | None:
        """What the record handed to the engine; None when it could not be read."""
        assert self.spool is not None
        try:
            return self.intake.replay(record, payload)
        except Exception:  # unreadable: keep the file's other records going
            logger.exception("otel-safety serve: cannot replay spool record %s", record)
            self.spool.release(record)
            return None

    def _store(self) -> DuckDBStore | DuckLakeStore:
        if self.options.lake:
            from otel_safety.exporters.ducklake import DuckLakeStore

            return DuckLakeStore(self.options.lake, self.options.lake_data_path)
        return DuckDBStore(self.settings.db_path, keep_open=self.settings.store_keep_open)

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> Sidecar:
        options = self.options
        try:
            self.replay()
            if options.grpc_port is not None:
                service = TraceService(self.intake, options.token, options.retry_after)
                self._grpc, self.grpc_port = build_server(
                    service,
                    host=options.host,
                    port=options.grpc_port,
                    max_request_bytes=options.max_request_bytes,
                    workers=options.grpc_workers,
                    tls=self._tls,
                )
                self._grpc.start()
            if options.http_port is not None:
                ssl_context = self._ssl_context()
                try:
                    self._http = OtlpHttpServer(
                        options.host,
                        options.http_port,
                        self.intake,
                        HttpOptions(
                            max_request_bytes=options.max_request_bytes,
                            token=options.token,
                            retry_after=options.retry_after,
                            read_timeout=options.read_timeout,
                            body_timeout=options.body_timeout,
                            max_connections=options.max_connections,
                            decoders=options.decoders,
                            decode_wait=options.decode_wait,
                        ),
                        self.health,
                        self.metrics_text,
                        ssl_context,
                        self._approvals(),
                    )
                except OSError as exc:
                    raise OSError(
                        f"cannot listen for OTLP/HTTP on {options.host}:{options.http_port} "
                        f"({exc.strerror or exc}); stop what holds the port or pick another "
                        "with --http-port"
                    ) from None
                self.http_port = self._http.port
                self._http_thread = threading.Thread(
                    target=self._http.serve_forever, name="otlp-http", daemon=True
                )
                self._http_thread.start()
        except BaseException:  # a port in use, say: leave no empty store behind
            self.stop()
            if self.metrics.total("spans_accepted") == 0:
                self._discard_new_store()
            raise
        return self

    def _approvals(self) -> ApprovalStore | None:
        """The guard's approval requests live in the DuckDB store file, when there is one."""
        if not self.settings.store or self.options.lake or self.settings.db_path == ":memory:":
            return None
        return ApprovalStore(self.settings.db_path, lock_wait=5.0)

    def _discard_new_store(self) -> None:
        """Remove the store this serve created, and its empty spool folders, when it could
        not start: a failed start leaves nothing behind. A store that existed stays."""
        if not self._new_store:
            return
        store = Path(self.settings.db_path)
        store.unlink(missing_ok=True)
        Path(f"{store}.wal").unlink(missing_ok=True)
        for spool in (self.spool, self.forward_spool):
            if spool is not None and spool.records == 0:
                spool.close(remove_if_empty=True)

    def stop(self) -> bool:
        """Drain and flush within `drain_timeout` seconds in all; safe to call twice. False
        when the flush was left unfinished (its thread still runs: exit the process).

        One deadline bounds the whole stop (requests in progress, judging, the store's and
        the next hop's flush), so that it ends within an orchestrator's grace period: a next
        hop that is down does not hold it, since what it has not taken stays in the spool.
        """
        if self._stopped:
            return self._flushed
        self._stopped = True
        self.intake.draining = True
        grace = self.options.drain_timeout
        deadline = time.monotonic() + grace

        def left() -> float:
            return max(0.0, deadline - time.monotonic())

        if self._grpc is not None:
            self._grpc.stop(left()).wait(left() + 1)
        if self._http is not None:
            if not self._http.drain(left()):
                logger.warning(
                    "OTLP/HTTP requests still running after %.0fs; stopping anyway", grace
                )
            if self._http_thread is not None:
                self._http_thread.join(min(5.0, left() + 1))
        flushed = threading.Thread(target=self._flush, args=(left,), daemon=True)
        flushed.start()
        flushed.join(left() + _STOP_SLACK)
        self._flushed = not flushed.is_alive()
        if not self._flushed:
            kept = (
                f"{self.spool.records} acknowledged requests not yet written (and what was "
                "not forwarded) stay in the spools for the next start"
                if self.spool is not None
                else "spans not yet written are lost (the spool is off)"
            )
            logger.warning(
                "otel-safety serve: the flush did not finish within --drain-seconds %.0f; %s",
                grace,
                kept,
            )
        return self._flushed

    def _flush(self, left: Callable[[], float]) -> None:
        """The stop's second half: judge what is buffered, flush and close the sinks."""
        self.engine.shutdown(int(left() * 1000))
        if self.spool is not None:
            # The folder beside the store goes when nothing is owed; one asked for stays.
            self.spool.close(remove_if_empty=self.options.spool is None)
            if owed := self.spool.records:
                logger.warning(
                    "otel-safety serve: %d acknowledged requests were not written in time; "
                    "they stay in the spool %s and are judged at the next start",
                    owed,
                    self.spool.folder,
                )
        self.metrics.own.shutdown()  # a last OTLP export of the final counts

    @property
    def unwritten(self) -> int:
        """Acknowledged requests the stop left in the spool, to be judged at the next start."""
        return self.spool.records if self.spool is not None else 0

    def __enter__(self) -> Sidecar:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- what it tells ------------------------------------------------------------------------
    @property
    def http_url(self) -> str | None:
        if self.http_port is None:
            return None
        scheme = "https" if self._tls else "http"
        host = f"[{self.options.host}]" if ":" in self.options.host else self.options.host
        return f"{scheme}://{host}:{self.http_port}"

    @property
    def grpc_target(self) -> str | None:
        if self.grpc_port is None:
            return None
        host = f"[{self.options.host}]" if ":" in self.options.host else self.options.host
        return f"{host}:{self.grpc_port}"

    def counts(self) -> dict[str, int]:
        """The headline counters: received, accepted, rejected, evaluated, flagged, forwarded."""
        stats = self.engine.stats
        return {
            "spans_received": self.metrics.total("spans_received"),
            "spans_accepted": self.metrics.total("spans_accepted"),
            "spans_rejected": self.metrics.total("spans_rejected"),
            "spans_evaluated": stats["spans_evaluated"],
            "spans_flagged": self.metrics.total("spans_flagged"),
            "traces_evaluated": stats["traces_evaluated"],
            "traces_flagged": stats["traces_flagged"],
            "spans_forwarded": self.metrics.total("spans_forwarded"),
            "spans_forward_failed": self.metrics.total("spans_forward_failed"),
            # GenAI spans with nothing to judge: content capture is off in the instrumentation
            "spans_without_content": stats["spans_without_content"],
            "log_records_received": self.metrics.total("log_records_received"),
            "log_events_matched": stats["log_events_matched"],
            # traces the store gave up on (it could not be written for too long) or refused
            "traces_store_dropped": getattr(self._store_sink, "dropped", 0),
            "traces_store_rejected": getattr(self._store_sink, "rejected", 0),
            # traces whose verdict halted their conversation, and those that name none
            "conversations_halted": self.metrics.total("conversations_halted"),
            "halts_without_conversation": (
                self._halt_sink.stats["halts_without_conversation"] if self._halt_sink else 0
            ),
        }

    def summary(self) -> str:
        counts = self.counts()
        text = ", ".join(f"{name.replace('_', ' ')} {value}" for name, value in counts.items())
        if counts["spans_without_content"]:
            text += (
                f"; {counts['spans_without_content']} GenAI spans carried no content, so "
                "nothing in them was judged: turn the instrumentation's content capture on "
                "(README, 'Content capture')"
            )
        return text

    def health(self) -> tuple[bool, dict[str, Any]]:
        ok = not self.intake.draining
        details: dict[str, Any] = {
            "status": "ok" if ok else "draining",
            "uptime_seconds": round(time.monotonic() - self._started, 1),
            "queue_waiting": self.intake.waiting(),
            "queue_capacity": self.intake.capacity,
            "buffered_traces": len(self.engine.buffer),
        }
        details.update((name, value) for name, (value, _) in self._budget_gauges().items())
        details.update(self.counts())
        if self._store_sink is not None:  # a full disk or a held file: said, not hidden
            details["store_error"] = self._store_sink.failing
        return ok, details

    def metrics_text(self) -> str:
        """`GET /metrics`: the Prometheus reader's rendering of the sidecar's own meter."""
        return self.metrics.own.prometheus_text()

    def _gauges(self) -> dict[str, tuple[float, str]]:
        """What the queues, buffers, store and spools hold now (observed at collection)."""
        counts = self.counts()
        return {
            "queue_waiting_spans": (self.intake.waiting(), "spans waiting for the pipeline"),
            "queue_capacity_spans": (self.intake.capacity, "spans the pipeline queue holds"),
            "buffered_traces": (len(self.engine.buffer), "traces waiting for their decision"),
            "draining": (int(self.intake.draining), "1 while shutting down"),
            "store_dropped_traces": (
                counts["traces_store_dropped"],
                "traces the store gave up on while it could not be written",
            ),
            "store_rejected_traces": (
                counts["traces_store_rejected"],
                "traces the store refused to take, even one by one",
            ),
            **self._budget_gauges(),
        }

    def _budget_gauges(self) -> dict[str, tuple[float, str]]:
        """What the byte budgets and spools hold now, for /health and /metrics alike."""
        gauges: dict[str, tuple[float, str]] = {
            "queue_waiting_bytes": (
                self.intake.waiting_bytes(),
                "bytes of requests whose spans the pipeline has not taken yet",
            ),
            "buffered_bytes": (
                self.engine.buffer.bytes,
                "bytes of span text held while traces wait for their decision",
            ),
        }
        if self._store_sink is not None:
            gauges["store_waiting_traces"] = (
                self._store_sink.waiting,
                "traces judged and not yet written to the store",
            )
            gauges["store_failing"] = (
                int(self._store_sink.failing is not None),
                "1 while the store cannot be written (its last write failed)",
            )
        if self.spool is not None:
            gauges["spool_records"] = (
                self.spool.records,
                "acknowledged requests whose traces are not yet all in the store",
            )
            gauges["spool_bytes"] = (self.spool.bytes, "bytes of the write-ahead spool on disk")
        if self.forward_spool is not None:
            gauges["forward_spool_records"] = (
                self.forward_spool.records,
                "batches of annotated spans on disk, not yet taken by the next hop",
            )
            gauges["forward_spool_bytes"] = (
                self.forward_spool.bytes,
                "bytes of annotated spans on disk for the next hop",
            )
        return gauges

    def _ssl_context(self) -> ssl.SSLContext | None:
        if self._tls is None:
            return None
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.options.tls_cert or "", self.options.tls_key)
        return context


def _read_tls(options: SidecarOptions) -> tuple[bytes, bytes] | None:
    if not options.tls_cert or not options.tls_key:
        return None
    return (
        read_named_file(options.tls_key, "--tls-key"),
        read_named_file(options.tls_cert, "--tls-cert"),
    )


def _adopt_free_folders(spool: Spool, others: list[str]) -> None:
    """What another serve on this store left in its folder and no running serve holds (it
    crashed, and one serve came back) is taken into `spool`, to be judged with its own."""
    for folder in others:
        if not Path(folder).is_dir():
            continue
        try:
            other = Spool(folder, max_bytes=spool.max_bytes)
        except SpoolBusy:
            continue  # a running serve's
        moved = spool.adopt(other)
        other.close(remove_if_empty=True)
        if moved:
            logger.warning(
                "otel-safety serve: took over %d spool segments another serve left in %s",
                moved,
                folder,
            )
