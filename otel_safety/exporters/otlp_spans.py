"""The one factory for OTLP span exporters: in-process (`configure`) and `serve --forward`.

The protocol is the one asked for, else `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`, else
`OTEL_EXPORTER_OTLP_PROTOCOL`, else `http/protobuf` (the specification's default). The
endpoint is the one asked for, else the SDK's exporters read `OTEL_EXPORTER_OTLP_[TRACES_]
ENDPOINT` themselves, as they read TLS, certificates, headers, compression and timeouts.
`http/json` uses our own exporter (`otlp_http_json`): the SDK's sends protobuf whatever the
variable says.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from urllib.parse import urlsplit

from opentelemetry.sdk.trace.export import SpanExporter

__all__ = [
    "OTLP_PROTOCOLS",
    "check_endpoint",
    "http_traces_url",
    "otlp_endpoint_from_env",
    "otlp_protocol_from_env",
    "otlp_span_exporter",
]

OTLP_PROTOCOLS = ("grpc", "http/protobuf", "http/json")


def otlp_endpoint_from_env() -> str | None:
    """`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or `OTEL_EXPORTER_OTLP_ENDPOINT`, if set."""
    return os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or os.environ.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    )


def otlp_protocol_from_env() -> str:
    return (
        os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    )


def _protocol_variable() -> str:
    """The variable `otlp_protocol_from_env` read its protocol from."""
    if os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"):
        return "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
    return "OTEL_EXPORTER_OTLP_PROTOCOL"


def otlp_span_exporter(
    endpoint: str | None = None,
    protocol: str | None = None,
    headers: Mapping[str, str] | None = None,
    timeout: float | None = None,
) -> SpanExporter:
    """The OTLP span exporter for `protocol` (from the environment when None), sending to
    `endpoint` (from the environment when None), waiting `timeout` seconds for an answer
    (from the environment when None). A ValueError says what a bad protocol or endpoint
    should look like."""
    named_by = "" if protocol else f" ({_protocol_variable()})"
    protocol = protocol or otlp_protocol_from_env()
    if protocol not in OTLP_PROTOCOLS:
        raise ValueError(
            f"unsupported OTLP protocol {protocol!r}{named_by}; use one of "
            f"{', '.join(OTLP_PROTOCOLS)}"
        )
    if endpoint is not None:
        check_endpoint(endpoint, protocol)
    extra = dict(headers or {}) or None
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        if endpoint is None:
            return OTLPSpanExporter(headers=extra, timeout=timeout)
        insecure = urlsplit(endpoint).scheme == "http" or None
        return OTLPSpanExporter(
            endpoint=endpoint, insecure=insecure, headers=extra, timeout=timeout
        )
    url = None if endpoint is None else http_traces_url(endpoint)
    if protocol == "http/protobuf":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter(endpoint=url, headers=extra, timeout=timeout)
    from otel_safety.exporters.otlp_http_json import OtlpHttpJsonExporter

    return OtlpHttpJsonExporter(endpoint=url, headers=extra, timeout=timeout)


def check_endpoint(endpoint: str, protocol: str) -> str:
    """`endpoint` if it names an OTLP endpoint for `protocol`, else a ValueError saying what
    one looks like: http(s)://host[:port][/path], or host:port for gRPC."""
    example = "http://collector:4317" if protocol == "grpc" else "http://collector:4318"
    problem = f"endpoint {endpoint!r} is not an OTLP endpoint; give one like {example}"
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
    if protocol != "grpc" or not host or not port.isdecimal() or not 0 < int(port) <= 65535:
        raise ValueError(problem)
    return endpoint


def http_traces_url(endpoint: str) -> str:
    """`http://host:4318` means the standard path, as OTEL_EXPORTER_OTLP_ENDPOINT does."""
    parts = urlsplit(endpoint)
    if not parts.scheme:
        raise ValueError(f"OTLP endpoint {endpoint!r} needs a scheme: http://host:port")
    if parts.path in ("", "/"):
        return endpoint.rstrip("/") + "/v1/traces"
    return endpoint


def timeout_from_env() -> float:
    """Seconds, as the Python SDK's exporters read the variable (default 10)."""
    raw = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT") or os.environ.get(
        "OTEL_EXPORTER_OTLP_TIMEOUT"
    )
    try:
        return float(raw) if raw else 10.0
    except ValueError:
        return 10.0
