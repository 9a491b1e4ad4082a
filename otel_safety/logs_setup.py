"""The LoggerProvider configure() sets up beside its TracerProvider, and its OTLP exporter.

Instrumentations send GenAI message content as log records and OpenTelemetry sends new
events (our findings among them) through the Logs API, so the drop-in setup needs logs as
much as traces. The provider made here is shut down by the engine, after its last findings.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence

from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor, LogRecordExporter
from opentelemetry.sdk.resources import Resource

logger = logging.getLogger(__name__)


def own_logger_provider(resource: Resource) -> LoggerProvider:
    """A LoggerProvider with the standard OTLP log exporter when the variables name one.
    No exit hook of its own: `LoggerProviderCloser` shuts it down after the engine."""
    provider = LoggerProvider(resource=resource, shutdown_on_exit=False)
    exporter = otlp_log_exporter_from_env()
    if exporter is not None:
        provider.add_log_record_processor(BatchLogRecordProcessor(exporter))
    return provider


class LoggerProviderCloser:
    """The last sink: shuts the LoggerProvider configure() made down after the engine's final
    findings went out through it (an exit hook of its own could run first and lose them)."""

    def __init__(self, provider: LoggerProvider) -> None:
        self.provider = provider

    def write(self, evaluations: Sequence) -> None:
        pass

    def tick(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self.provider.force_flush(timeout_millis)

    def shutdown(self) -> None:
        self.provider.shutdown()


def otlp_log_exporter_from_env() -> LogRecordExporter | None:
    """The standard OTLP log exporter when `OTEL_EXPORTER_OTLP_[LOGS_]ENDPOINT` is set."""
    endpoint = os.environ.get("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT") or os.environ.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    )
    if not endpoint:
        return None
    protocol = (
        os.environ.get("OTEL_EXPORTER_OTLP_LOGS_PROTOCOL")
        or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    )
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter
    elif protocol == "http/protobuf":
        from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
    else:  # http/json: there is no JSON log exporter to send them with
        logger.warning(
            "otel-safety: log records are not exported with OTLP protocol %r (grpc or "
            "http/protobuf only); findings still go out as span events unless "
            "OTEL_SAFETY_EVALUATION_EVENTS=logs",
            protocol,
        )
        return None
    return OTLPLogExporter()
