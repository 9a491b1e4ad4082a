"""Forwarding annotated spans to the next hop with the standard OTLP exporters.

The exporter runs behind the SDK's `BatchSpanProcessor`, not on the engine's worker: a slow
or unreachable next hop then costs its own bounded queue (spans beyond it are dropped and
logged by the SDK) instead of stalling the detectors and, through backpressure, every client.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from urllib.parse import urlsplit

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from otel_safety.pipeline import TraceEvaluation
from otel_safety.sidecar.metrics import Metrics

logger = logging.getLogger("otel_safety.sidecar")

PROTOCOLS = ("grpc", "http/protobuf")


def otlp_exporter(
    endpoint: str, protocol: str = "grpc", headers: Mapping[str, str] | None = None
) -> SpanExporter:
    """The standard exporter for `protocol`; TLS, certificates, compression and timeouts come
    from the usual `OTEL_EXPORTER_OTLP_TRACES_*` variables, which the exporters read."""
    if protocol in PROTOCOLS:
        check_endpoint(endpoint, protocol)
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        insecure = urlsplit(endpoint).scheme == "http" or None
        return OTLPSpanExporter(
            endpoint=endpoint, insecure=insecure, headers=dict(headers or {}) or None
        )
    if protocol == "http/protobuf":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter(
            endpoint=http_traces_url(endpoint), headers=dict(headers or {}) or None
        )
    raise ValueError(
        f"unsupported forward protocol {protocol!r}; use one of {', '.join(PROTOCOLS)}"
    )


def check_endpoint(endpoint: str, protocol: str) -> str:
    """`endpoint` if it names an OTLP endpoint for `protocol`, else a ValueError saying what
    one looks like: http(s)://host[:port][/path], or host:port for gRPC."""
    example = "http://collector:4317" if protocol == "grpc" else "http://collector:4318"
    problem = f"forward endpoint {endpoint!r} is not an OTLP endpoint; give one like {example}"
    if "://" in endpoint:
        parts = urlsplit(endpoint)
        try:
            port_ok = parts.port is None or parts.port > 0
        except ValueError:
            port_ok = False
        if parts.scheme not in ("http", "https") or not parts.hostname or not port_ok:
            raise ValueError(problem)
        return endpoint
    host, _, port = endpoint.rpartition(":")
    if protocol != "grpc" or not host or not port.isdigit() or not 0 < int(port) <= 65535:
        raise ValueError(problem)
    return endpoint


def http_traces_url(endpoint: str) -> str:
    """`http://host:4318` means the standard path, as OTEL_EXPORTER_OTLP_ENDPOINT does."""
    parts = urlsplit(endpoint)
    if not parts.scheme:
        raise ValueError(f"forward endpoint {endpoint!r} needs a scheme: http://host:port")
    if parts.path in ("", "/"):
        return endpoint.rstrip("/") + "/v1/traces"
    return endpoint


class _CountingExporter(SpanExporter):
    """Counts what the next hop acknowledged and what it did not."""

    def __init__(self, exporter: SpanExporter, metrics: Metrics) -> None:
        self.exporter = exporter
        self.metrics = metrics

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            result = self.exporter.export(spans)
        except Exception:
            logger.exception("forwarding %d spans failed", len(spans))
            result = SpanExportResult.FAILURE
        if result is SpanExportResult.SUCCESS:
            self.metrics.add("spans_forwarded", len(spans))
        else:
            self.metrics.add("spans_forward_failed", len(spans))
        return result

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self.exporter.force_flush(timeout_millis)

    def shutdown(self) -> None:
        self.exporter.shutdown()


class ForwardSink:
    """An engine sink that queues annotated spans for the next hop."""

    def __init__(
        self,
        exporter: SpanExporter,
        metrics: Metrics,
        *,
        max_queue_size: int = 65_536,
        max_export_batch_size: int = 512,
        schedule_delay_millis: int = 500,
    ) -> None:
        self.processor = BatchSpanProcessor(
            _CountingExporter(exporter, metrics),
            max_queue_size=max_queue_size,
            max_export_batch_size=max_export_batch_size,
            schedule_delay_millis=schedule_delay_millis,
        )

    def write(self, evaluations: Sequence[TraceEvaluation]) -> None:
        for evaluation in evaluations:
            for span in evaluation.spans:
                self.processor.on_end(span)

    def tick(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self.processor.force_flush(timeout_millis)

    def shutdown(self) -> None:
        self.processor.shutdown()
