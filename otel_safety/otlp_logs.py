"""OTLP log requests: decoded from protobuf or OTLP/JSON, read for GenAI events, and turned
back into SDK log records so the standard exporters can send them on unchanged."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Iterator
from typing import Any

from google.protobuf import json_format
from opentelemetry import trace
from opentelemetry._logs import LogRecord, SeverityNumber
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord as PbLogRecord
from opentelemetry.proto.logs.v1.logs_pb2 import ResourceLogs, ScopeLogs
from opentelemetry.sdk._logs import ReadWriteLogRecord
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from otel_safety.logs import LogEvent, event_name, genai_event
from otel_safety.otlp import OtlpDecodeError, any_value, key_values

__all__ = [
    "ExportLogsServiceRequest",
    "log_events_from_request",
    "log_record_count",
    "logs_request_from_json",
    "sdk_log_records",
]


def log_record_count(request: ExportLogsServiceRequest) -> int:
    return sum(
        len(scope.log_records)
        for resource in request.resource_logs
        for scope in resource.scope_logs
    )


def logs_request_from_json(document: Any) -> ExportLogsServiceRequest:
    """Parse one OTLP/JSON logs request (trace and span ids in hex, as OTLP/JSON writes them).

    Raises `OtlpDecodeError` for anything that is not one.
    """
    if not isinstance(document, dict):
        raise OtlpDecodeError(f"expected a JSON object, got {type(document).__name__}")
    for path, record in _records(document):
        for key in ("traceId", "trace_id", "spanId", "span_id"):
            value = record.get(key)
            if isinstance(value, str) and value:
                record[key] = _hex_to_base64(value, f"{path}.{key}")
    try:
        return json_format.ParseDict(
            document, ExportLogsServiceRequest(), ignore_unknown_fields=True
        )
    except (json_format.ParseError, TypeError, ValueError, RecursionError) as exc:
        raise OtlpDecodeError(str(exc) or type(exc).__name__) from None


def log_events_from_request(request: ExportLogsServiceRequest) -> list[LogEvent]:
    """The GenAI events tied to a span, in request order; other records are not ours."""
    events = []
    for _resource, _scope, record in _walk(request):
        attributes = key_values(record.attributes)
        name = event_name(record.event_name, attributes)
        event = genai_event(
            name,
            _id(record.trace_id, 16),
            _id(record.span_id, 8),
            record.time_unix_nano or record.observed_time_unix_nano,
            attributes,
            any_value(record.body) if record.HasField("body") else None,
        )
        if event is not None:
            events.append(event)
    return events


def sdk_log_records(
    request: ExportLogsServiceRequest, masker: Callable[[Any], tuple[Any, int]] | None = None
) -> tuple[list[ReadWriteLogRecord], int]:
    """Every record of the request as the SDK holds it, resource and scope included; with
    `masker`, its body and attributes masked (and how many things it masked)."""
    records, masked = [], 0
    for resource_logs, scope_logs, record in _walk(request):
        body = any_value(record.body) if record.HasField("body") else None
        attributes = key_values(record.attributes)
        if masker is not None:
            (body, attributes), count = masker((body, attributes))
            masked += count
        resource = Resource(key_values(resource_logs.resource.attributes))
        scope = InstrumentationScope(
            scope_logs.scope.name, scope_logs.scope.version or None, scope_logs.schema_url or None
        )
        records.append(
            ReadWriteLogRecord(
                LogRecord(
                    timestamp=record.time_unix_nano or None,
                    observed_timestamp=record.observed_time_unix_nano or None,
                    context=_context(record),
                    severity_text=record.severity_text or None,
                    severity_number=_severity(record.severity_number),
                    body=body,
                    attributes=attributes,
                    event_name=record.event_name or None,
                ),
                resource=resource,
                instrumentation_scope=scope,
            )
        )
    return records, masked


def _severity(number: int) -> SeverityNumber | None:
    """The record's severity; an unset or unknown number (a newer or broken sender) is none."""
    try:
        return SeverityNumber(number) if number else None
    except ValueError:
        return None


def _walk(
    request: ExportLogsServiceRequest,
) -> Iterator[tuple[ResourceLogs, ScopeLogs, PbLogRecord]]:
    for resource_logs in request.resource_logs:
        for scope_logs in resource_logs.scope_logs:
            for record in scope_logs.log_records:
                yield resource_logs, scope_logs, record


def _context(record: PbLogRecord) -> Any:
    """A context naming the record's span, so the exported record keeps its ids."""
    trace_id, span_id = _id(record.trace_id, 16), _id(record.span_id, 8)
    parent = SpanContext(
        trace_id or 0,
        span_id or 0,
        is_remote=True,
        trace_flags=TraceFlags(record.flags & 0xFF),
    )
    return trace.set_span_in_context(NonRecordingSpan(parent))


def _id(raw: bytes, size: int) -> int | None:
    return int.from_bytes(raw, "big") if len(raw) == size and any(raw) else None


def _records(document: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for r, resource in enumerate(_list(document, "resourceLogs", "resource_logs")):
        for s, scope in enumerate(_list(resource, "scopeLogs", "scope_logs")):
            for n, record in enumerate(_list(scope, "logRecords", "log_records")):
                yield f"resourceLogs[{r}].scopeLogs[{s}].logRecords[{n}]", record


def _list(node: Any, *keys: str) -> list[dict[str, Any]]:
    if not isinstance(node, dict):
        return []
    for key in keys:
        if isinstance(node.get(key), list):
            return [item for item in node[key] if isinstance(item, dict)]
    return []


def _hex_to_base64(value: str, where: str) -> str:
    try:
        return base64.b64encode(bytes.fromhex(value)).decode("ascii")
    except (ValueError, binascii.Error):
        raise OtlpDecodeError(f"{where}: not a hex id: {value[:40]!r}") from None
