"""Forwarding log records to the next hop: the apps' own, passed through unchanged (but for
their secrets, masked in body and attributes when `redact_secrets` is on, as in spans), and
our findings as `gen_ai.evaluation.result` records on the spans they judge.

As for spans, the standard OTLP exporter runs behind the SDK's batching processor, with its
own bounded queue: a slow next hop drops records there (counted) instead of stalling the
receivers or the detectors.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from urllib.parse import urlsplit

from opentelemetry.sdk._logs import ReadableLogRecord, ReadWriteLogRecord
from opentelemetry.sdk._logs.export import (
    BatchLogRecordProcessor,
    LogRecordExporter,
    LogRecordExportResult,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from otel_safety.exporters.evaluation_logs import SCOPE, evaluation_records
from otel_safety.otlp_logs import ExportLogsServiceRequest, sdk_log_records
from otel_safety.pipeline import TraceEvaluation
from otel_safety.redaction import redact_value
from otel_safety.sidecar.metrics import Metrics

logger = logging.getLogger("otel_safety.sidecar")


def otlp_log_exporter(
    endpoint: str, protocol: str = "grpc", headers: Mapping[str, str] | None = None
) -> LogRecordExporter:
    """The standard log exporter for `protocol`, to the same next hop as the spans."""
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter

        insecure = urlsplit(endpoint).scheme == "http" or None
        return OTLPLogExporter(
            endpoint=endpoint, insecure=insecure, headers=dict(headers or {}) or None
        )
    if protocol == "http/protobuf":
        from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter

        return OTLPLogExporter(endpoint=logs_url(endpoint), headers=dict(headers or {}) or None)
    raise ValueError(f"unsupported forward protocol {protocol!r}; use grpc or http/protobuf")


def logs_url(endpoint: str) -> str:
    """Where OTLP/HTTP log records go beside spans sent to `endpoint`: its `/v1/logs`, also
    when the endpoint names the traces path (`.../v1/traces`, which a log record would
    reach as a corrupt trace request); any other path is taken as given."""
    path = urlsplit(endpoint).path
    if path in ("", "/"):
        return endpoint.rstrip("/") + "/v1/logs"
    if path.rstrip("/").endswith("/v1/traces"):
        return endpoint.rstrip("/").removesuffix("/v1/traces") + "/v1/logs"
    return endpoint


class _CountingLogExporter(LogRecordExporter):
    """Counts what the next hop acknowledged and what it did not."""

    def __init__(self, exporter: LogRecordExporter, metrics: Metrics) -> None:
        self.exporter = exporter
        self.metrics = metrics

    def export(self, batch: Sequence[ReadableLogRecord]) -> LogRecordExportResult:
        try:
            result = self.exporter.export(batch)
        except Exception:
            logger.exception("forwarding %d log records failed", len(batch))
            result = LogRecordExportResult.FAILURE
        ok = result is LogRecordExportResult.SUCCESS
        self.metrics.add(
            "log_records_forwarded" if ok else "log_records_forward_failed", len(batch)
        )
        return result

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self.exporter.force_flush(timeout_millis)

    def shutdown(self) -> None:
        self.exporter.shutdown()


class LogForwarder:
    """Queues log records for the next hop; an engine sink for the findings as well."""

    def __init__(
        self,
        exporter: LogRecordExporter,
        metrics: Metrics,
        *,
        evaluations: bool = True,
        redact: bool = False,
        max_queue_size: int = 65_536,
        schedule_delay_millis: int = 500,
    ) -> None:
        self.evaluations = evaluations
        self.redact = redact
        self.metrics = metrics
        self.processor = BatchLogRecordProcessor(
            _CountingLogExporter(exporter, metrics),
            max_queue_size=max_queue_size,
            schedule_delay_millis=schedule_delay_millis,
        )
        self._scope = InstrumentationScope(SCOPE)

    def forward(self, request: ExportLogsServiceRequest) -> None:
        """Pass a received request's records on (never blocks: a full queue drops them)."""
        records, masked = sdk_log_records(request, redact_value if self.redact else None)
        if masked:
            self.metrics.add("log_secrets_redacted", masked)
        for record in records:
            self.processor.on_emit(record)

    # -- engine sink: findings as log records, with the judged span's resource -------------
    def write(self, evaluations: Sequence[TraceEvaluation]) -> None:
        if not self.evaluations:
            return
        for evaluation in evaluations:
            for record, span in evaluation_records(evaluation):
                self.processor.on_emit(
                    ReadWriteLogRecord(
                        record,
                        resource=span.resource or Resource.get_empty(),
                        instrumentation_scope=self._scope,
                    )
                )

    def tick(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self.processor.force_flush(timeout_millis)

    def shutdown(self) -> None:
        self.processor.shutdown()
