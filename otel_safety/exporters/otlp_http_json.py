"""OTLP/HTTP with the JSON encoding, for `OTEL_EXPORTER_OTLP_PROTOCOL=http/json`.

The SDK's HTTP exporter sends protobuf whatever the protocol variable says; a backend that
only reads JSON then gets bytes it cannot parse. This exporter posts the OTLP/JSON mapping
(hex ids, camelCase, integer enums: `otlp.request_to_json`) with `Content-Type:
application/json`, reads the endpoint, headers and timeout from the same standard variables,
and retries the statuses the OTLP specification calls retryable.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Mapping, Sequence

import requests
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.util.re import parse_env_headers

from otel_safety.exporters.otlp_spans import timeout_from_env
from otel_safety.otlp import request_to_json

__all__ = ["OtlpHttpJsonExporter"]

logger = logging.getLogger(__name__)

RETRYABLE = frozenset({429, 502, 503, 504})
ATTEMPTS = 4


class OtlpHttpJsonExporter(SpanExporter):
    def __init__(
        self,
        endpoint: str | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> None:
        self.endpoint = endpoint or _endpoint_from_env()
        self.headers = {"Content-Type": "application/json", **(headers or _headers_from_env())}
        self.timeout = timeout if timeout is not None else timeout_from_env()
        self._session = requests.Session()
        self._closed = False

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self._closed:
            return SpanExportResult.FAILURE
        if not spans:
            return SpanExportResult.SUCCESS
        body = json.dumps(request_to_json(spans), separators=(",", ":")).encode()
        deadline = time.monotonic() + self.timeout
        pause = 0.5
        for attempt in range(ATTEMPTS):
            try:
                reply = self._session.post(
                    self.endpoint,
                    data=body,
                    headers=self.headers,
                    timeout=max(0.1, deadline - time.monotonic()),
                )
            except requests.RequestException as exc:
                status, problem = None, str(exc)
            else:
                if reply.ok:
                    return SpanExportResult.SUCCESS
                status, problem = reply.status_code, reply.text[:200]
            retryable = status is None or status in RETRYABLE
            if not retryable or attempt == ATTEMPTS - 1 or time.monotonic() + pause > deadline:
                logger.warning(
                    "OTLP/JSON export of %d spans to %s failed: %s %s",
                    len(spans),
                    self.endpoint,
                    status or "",
                    problem,
                )
                return SpanExportResult.FAILURE
            time.sleep(pause)
            pause *= 2
        return SpanExportResult.FAILURE

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True

    def shutdown(self) -> None:
        self._closed = True
        self._session.close()


def _endpoint_from_env() -> str:
    """The traces endpoint is used as given; the general one gets `/v1/traces` (the spec)."""
    traces = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    if traces:
        return traces
    base = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "http://localhost:4318")
    return base.rstrip("/") + "/v1/traces"


def _headers_from_env() -> dict[str, str]:
    raw = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_HEADERS") or os.environ.get(
        "OTEL_EXPORTER_OTLP_HEADERS", ""
    )
    return parse_env_headers(raw, liberal=True)  # as the SDK's own exporters read them
