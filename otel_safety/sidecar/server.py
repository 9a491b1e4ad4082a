"""The sidecar as one object: sinks, the shared engine, both receivers, and an orderly stop."""

from __future__ import annotations

import logging
import ssl
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from otel_safety.bootstrap import build_engine
from otel_safety.config import Settings
from otel_safety.engine import Sink
from otel_safety.exporters.duckdb import DuckDBStore
from otel_safety.sidecar.forward import ForwardSink, otlp_exporter
from otel_safety.sidecar.grpc_server import TraceService, build_server
from otel_safety.sidecar.http_server import HttpOptions, OtlpHttpServer
from otel_safety.sidecar.intake import Intake
from otel_safety.sidecar.metrics import (
    ENGINE_COUNTERS,
    FlagCounter,
    Metrics,
    ProblemLog,
    render_prometheus,
)

logger = logging.getLogger("otel_safety.sidecar")


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
    grpc_workers: int = 8
    forward_endpoint: str | None = None
    forward_protocol: str = "grpc"
    forward_headers: Mapping[str, str] = field(default_factory=dict)
    lake: str | None = None
    lake_data_path: str | None = None
    drain_timeout: float = 30.0


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
        self.metrics = Metrics()
        self.problems = ProblemLog()
        self._tls = _read_tls(options)  # fail on unreadable files before anything starts
        store = Path(settings.db_path)
        new_store = settings.store and not options.lake and not store.exists()
        sinks: list[Sink] = []
        if settings.store:
            sinks.append(self._store())
        if options.forward_endpoint:
            exporter = otlp_exporter(
                options.forward_endpoint, options.forward_protocol, options.forward_headers
            )
            sinks.append(ForwardSink(exporter, self.metrics))
        sinks.append(FlagCounter(self.metrics))
        sinks.extend(extra_sinks)
        try:
            self.engine = build_engine(settings, sinks)
        except Exception:  # a bad data folder or policy: leave no empty store behind
            for sink in sinks:
                sink.shutdown()
            if new_store:
                store.unlink(missing_ok=True)
                Path(f"{store}.wal").unlink(missing_ok=True)
            raise
        self.intake = Intake(self.engine, settings.queue_size, self.metrics, self.problems)
        self._grpc: grpc.Server | None = None
        self._http: OtlpHttpServer | None = None
        self._http_thread: threading.Thread | None = None
        self.grpc_port: int | None = None
        self.http_port: int | None = None
        self._started = time.monotonic()
        self._stopped = False

    def _store(self) -> Sink:
        if self.options.lake:
            from otel_safety.exporters.ducklake import DuckLakeStore

            return DuckLakeStore(self.options.lake, self.options.lake_data_path)
        return DuckDBStore(self.settings.db_path)

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> Sidecar:
        options = self.options
        try:
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
                    ),
                    self.health,
                    self.metrics_text,
                    self._ssl_context(),
                )
                self.http_port = self._http.port
                self._http_thread = threading.Thread(
                    target=self._http.serve_forever, name="otlp-http", daemon=True
                )
                self._http_thread.start()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Drain and flush; safe to call twice."""
        if self._stopped:
            return
        self._stopped = True
        self.intake.draining = True
        grace = self.options.drain_timeout
        if self._grpc is not None:
            self._grpc.stop(grace).wait(grace + 1)
        if self._http is not None:
            if not self._http.drain(grace):
                logger.warning(
                    "OTLP/HTTP requests still running after %.0fs; stopping anyway", grace
                )
            if self._http_thread is not None:
                self._http_thread.join(5)
        self.engine.shutdown(int(grace * 1000))
        logger.info("otel-safety serve stopped: %s", self.summary())

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
        }

    def summary(self) -> str:
        return ", ".join(
            f"{name.replace('_', ' ')} {value}" for name, value in self.counts().items()
        )

    def health(self) -> tuple[bool, dict[str, Any]]:
        ok = not self.intake.draining
        details: dict[str, Any] = {
            "status": "ok" if ok else "draining",
            "uptime_seconds": round(time.monotonic() - self._started, 1),
            "queue_waiting": self.intake.waiting(),
            "queue_capacity": self.intake.capacity,
            "buffered_traces": len(self.engine.buffer),
        }
        details.update(self.counts())
        return ok, details

    def metrics_text(self) -> str:
        gauges = {
            "queue_waiting_spans": (self.intake.waiting(), "spans waiting for the pipeline"),
            "queue_capacity_spans": (self.intake.capacity, "spans the pipeline queue holds"),
            "buffered_traces": (len(self.engine.buffer), "traces waiting for their decision"),
            "draining": (int(self.intake.draining), "1 while shutting down"),
        }
        stats = {name: self.engine.stats[name] for name in ENGINE_COUNTERS}
        return render_prometheus(self.metrics, stats, gauges)

    def _ssl_context(self) -> ssl.SSLContext | None:
        if self._tls is None:
            return None
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.options.tls_cert or "", self.options.tls_key)
        return context


def _read_tls(options: SidecarOptions) -> tuple[bytes, bytes] | None:
    if not options.tls_cert or not options.tls_key:
        return None
    return Path(options.tls_key).read_bytes(), Path(options.tls_cert).read_bytes()
