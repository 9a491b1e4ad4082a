"""Forwarding annotated spans to the next hop with the standard OTLP exporters.

The exporter comes from the one OTLP factory (`exporters.otlp_spans`) and runs behind the
one span batcher (`exporters.span_batching.ExporterSink`), not on the engine's worker: a
slow or unreachable next hop then costs its own bounded queue (spans beyond it are dropped
and counted) instead of stalling the detectors and, through backpressure, every client.
"""

from __future__ import annotations

from collections.abc import Mapping

from opentelemetry.sdk.trace.export import SpanExporter

from otel_safety.exporters.otlp_spans import check_endpoint, otlp_span_exporter
from otel_safety.exporters.span_batching import ExporterSink
from otel_safety.sidecar.metrics import Metrics

__all__ = ["PROTOCOLS", "check_endpoint", "forward_sink", "otlp_exporter"]

# The next hop gets spans and log records alike: the protocols both exporters speak.
PROTOCOLS = ("grpc", "http/protobuf")


def otlp_exporter(
    endpoint: str,
    protocol: str = "grpc",
    headers: Mapping[str, str] | None = None,
    timeout: float | None = None,
) -> SpanExporter:
    """The standard exporter for `protocol`; TLS, certificates, compression and timeouts
    (unless `timeout` is given) come from the usual `OTEL_EXPORTER_OTLP_TRACES_*` variables,
    which the exporters read."""
    if protocol not in PROTOCOLS:
        raise ValueError(
            f"unsupported forward protocol {protocol!r}; use one of {', '.join(PROTOCOLS)}"
        )
    return otlp_span_exporter(endpoint, protocol, headers, timeout)


def forward_sink(
    exporter: SpanExporter,
    metrics: Metrics,
    *,
    max_queue_size: int = 65_536,
    max_export_batch_size: int = 512,
    schedule_delay_millis: int = 500,
) -> ExporterSink:
    """The batched sink for the next hop, counting what it took and what it did not."""

    def counted(spans: int, ok: bool) -> None:
        metrics.add("spans_forwarded" if ok else "spans_forward_failed", spans)

    sink = ExporterSink(
        exporter,
        max_queue_size=max_queue_size,
        max_export_batch_size=max_export_batch_size,
        schedule_delay_millis=schedule_delay_millis,
        on_export=counted,
        on_drop=lambda spans: metrics.add("spans_forward_failed", spans),
    )
    return sink
