"""`serve` takes OTLP logs too: GenAI events sent as log records are read with their spans.

The app side is the real SDK with the standard OTLP span and log exporters, over gRPC and
over HTTP, to a sidecar on 127.0.0.1; the chat span carries no content, the model's request
for `rm -rf /` travels only in a `gen_ai.client.inference.operation.details` log record (as
opentelemetry-util-genai emits it with content capture set to events). The sidecar must
flag the chat span, store it, and forward both the app's log records and its findings as
`gen_ai.evaluation.result` log records to a real next hop.
"""

from __future__ import annotations

import json

import duckdb
import grpc
import httpx
import pytest
from opentelemetry._logs import LogRecord
from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter as GrpcLogs
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpans
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter as HttpLogs
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpans
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import (
    BatchLogRecordProcessor,
    LogRecordExporter,
    LogRecordExportResult,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from sidecar_support import RM_RF_OUTPUT, GrpcNextHop, HttpNextHop, wait_for

from otel_safety import semconv as sc
from otel_safety.config import Settings
from otel_safety.content_capture import NO_CONTENT_NOTE, unjudged_spans_note
from otel_safety.otlp import key_values
from otel_safety.sidecar import Sidecar, SidecarOptions

INPUT = [{"role": "user", "parts": [{"type": "text", "content": "Tidy up my machine."}]}]


def _sidecar(
    tmp_path, hop, log_wait: float | None = None, redact_secrets: bool | None = None
) -> Sidecar:
    settings = Settings.resolve(
        environ={},
        db_path=str(tmp_path / "store.duckdb"),
        detectors=["tool_guard"],
        decision_wait=5.0,
        detection="thread",
        log_wait=log_wait,
        redact_secrets=redact_secrets,
    )
    protocol = "grpc" if isinstance(hop, GrpcNextHop) else "http/protobuf"
    options = SidecarOptions(
        grpc_port=0, http_port=0, forward_endpoint=hop.endpoint, forward_protocol=protocol
    )
    return Sidecar(settings, options)


def _app(spans: SpanExporter, logs: LogRecordExporter) -> tuple[int, int]:
    """One chat call whose content goes out only as a log record; its (trace, span) ids.
    Logs are flushed before spans, as the SDK's defaults (1 s for logs, 5 s for spans) do."""
    resource = Resource.create({"service.name": "logs-over-otlp"})
    tracer_provider = TracerProvider(resource=resource)
    tracer_provider.add_span_processor(BatchSpanProcessor(spans))
    logger_provider = LoggerProvider(resource=resource, shutdown_on_exit=False)
    logger_provider.add_log_record_processor(BatchLogRecordProcessor(logs))
    tracer = tracer_provider.get_tracer("app")
    with (
        tracer.start_as_current_span("agent run"),
        tracer.start_as_current_span(
            "chat fake", attributes={"gen_ai.operation.name": "chat"}
        ) as chat,
    ):
        logger_provider.get_logger("app").emit(
            LogRecord(
                event_name="gen_ai.client.inference.operation.details",
                attributes={
                    "gen_ai.operation.name": "chat",
                    "gen_ai.response.id": "chatcmpl-1",
                    "gen_ai.input.messages": json.dumps(INPUT),
                    "gen_ai.output.messages": json.dumps(RM_RF_OUTPUT),
                },
            )
        )
        ids = chat.get_span_context().trace_id, chat.get_span_context().span_id
    logger_provider.shutdown()
    tracer_provider.shutdown()
    return ids


def _check(sidecar: Sidecar, hop, ids: tuple[int, int], app_records: int = 0) -> None:
    with duckdb.connect(sidecar.settings.db_path, read_only=True) as con:
        flagged = con.execute(
            "SELECT f.detector, f.escalation_level, s.name FROM findings f "
            "JOIN spans s USING (trace_id, span_id) WHERE f.detected"
        ).fetchall()
        notes = con.execute("SELECT notes FROM spans WHERE notes IS NOT NULL").fetchall()
    assert flagged == [("tool_guard", "HARD_STOP", "chat fake")]
    assert notes == []  # the log record supplied the content
    counts = sidecar.counts()
    assert counts["log_events_matched"] == 1 and counts["spans_without_content"] == 0
    records = [
        record
        for request in hop.logs()
        for resource in request.resource_logs
        for scope in resource.scope_logs
        for record in scope.log_records
    ]
    names = sorted(record.event_name for record in records)
    expected = ["gen_ai.client.inference.operation.details", sc.GEN_AI_EVALUATION_RESULT]
    assert names == [""] * app_records + expected
    (result,) = [r for r in records if r.event_name == sc.GEN_AI_EVALUATION_RESULT]
    trace_id, span_id = ids
    assert result.trace_id == trace_id.to_bytes(16, "big")
    assert result.span_id == span_id.to_bytes(8, "big")
    attributes = key_values(result.attributes)
    assert attributes[sc.GEN_AI_EVALUATION_NAME] == "tool_guard"
    assert attributes["gen_ai.response.id"] == "chatcmpl-1"


def test_logs_over_grpc_are_read_with_their_spans_and_forwarded(tmp_path):
    with GrpcNextHop() as hop:
        sidecar = _sidecar(tmp_path, hop)
        with sidecar:
            target = f"http://{sidecar.grpc_target}"
            ids = _app(GrpcSpans(endpoint=target, insecure=True), GrpcLogs(target, insecure=True))
            wait_for(lambda: sidecar.counts()["traces_evaluated"] >= 1, what="the judged trace")
        wait_for(lambda: len(hop.logs()) >= 1, what="forwarded log records")
        _check(sidecar, hop, ids)


def test_logs_over_http_are_read_with_their_spans_and_forwarded(tmp_path):
    with HttpNextHop() as hop:
        sidecar = _sidecar(tmp_path, hop)
        with sidecar:
            url = sidecar.http_url
            ids = _app(HttpSpans(endpoint=f"{url}/v1/traces"), HttpLogs(endpoint=f"{url}/v1/logs"))
            wait_for(lambda: sidecar.counts()["traces_evaluated"] >= 1, what="the judged trace")
        _check(sidecar, hop, ids)


def test_otlp_json_logs_and_spans_without_content_are_counted(tmp_path, span_factory):
    """OTLP/JSON logs are read too (hex ids); a chat span with nothing to judge is named in
    the store, the counts, /metrics and the stop summary."""
    with HttpNextHop() as hop:
        sidecar = _sidecar(tmp_path, hop)
        with sidecar:
            document = {
                "resourceLogs": [
                    {
                        "scopeLogs": [
                            {
                                "logRecords": [
                                    {
                                        "traceId": "ab" * 16,
                                        "spanId": "cd" * 8,
                                        "eventName": "gen_ai.choice",
                                        "body": {"stringValue": "stray"},
                                    }
                                ]
                            }
                        ]
                    }
                ]
            }
            reply = httpx.post(f"{sidecar.http_url}/v1/logs", json=document, timeout=10)
            assert reply.status_code == 200, reply.text
            bad = httpx.post(
                f"{sidecar.http_url}/v1/logs",
                content=b'{"resourceLogs": [{"scopeLogs": [{"logRecords": [{"traceId": "zz"}]}]}]}',
                headers={"Content-Type": "application/json"},
                timeout=10,
            )
            assert bad.status_code == 400
            with (
                span_factory.tracer.start_as_current_span("agent run"),
                span_factory.tracer.start_as_current_span(
                    "chat fake", attributes={"gen_ai.operation.name": "chat"}
                ),
            ):
                pass
            reply = httpx.post(
                f"{sidecar.http_url}/v1/traces",
                content=_encode(span_factory.exporter.get_finished_spans()),
                headers={"Content-Type": "application/x-protobuf"},
                timeout=10,
            )
            assert reply.status_code == 200
            wait_for(lambda: sidecar.counts()["traces_evaluated"] >= 1, what="the judged trace")
            metrics = httpx.get(f"{sidecar.http_url}/metrics", timeout=10).text
        counts = sidecar.counts()
        assert counts["log_records_received"] == 1
        assert counts["spans_without_content"] == 1
        assert "otel_safety_sidecar_engine_spans_without_content_total 1" in metrics
        assert "1 GenAI spans carried no content" in sidecar.summary()
        with duckdb.connect(sidecar.settings.db_path, read_only=True) as con:
            notes = con.execute("SELECT name, notes FROM spans WHERE notes IS NOT NULL").fetchall()
        assert sorted((name, json.loads(value)) for name, value in notes) == [
            ("agent run", [unjudged_spans_note(1)]),  # the root says its verdict is partial
            ("chat fake", [NO_CONTENT_NOTE]),
        ]
        assert sidecar.engine.stats["log_events_unmatched"] == 1  # the stray, never judged


def _encode(spans) -> bytes:
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    return encode_spans(spans).SerializeToString()


@pytest.mark.process
def test_logs_need_the_token_and_valid_requests_on_both_transports(tmp_path):
    settings = Settings.resolve(environ={}, db_path=str(tmp_path / "s.duckdb"))
    options = SidecarOptions(grpc_port=0, http_port=0, token="s3cret")
    with Sidecar(settings, options) as sidecar:
        body = ExportLogsServiceRequest().SerializeToString()
        protobuf = {"Content-Type": "application/x-protobuf"}
        url = f"{sidecar.http_url}/v1/logs"
        assert httpx.post(url, content=body, headers=protobuf).status_code == 401
        authorized = {**protobuf, "Authorization": "Bearer s3cret"}
        assert httpx.post(url, content=body, headers=authorized).status_code == 200
        assert httpx.post(url, content=b"\xff\x00garbage", headers=authorized).status_code == 400
        with grpc.insecure_channel(sidecar.grpc_target) as channel:
            export = channel.unary_unary(
                "/opentelemetry.proto.collector.logs.v1.LogsService/Export",
                request_serializer=lambda raw: raw,
                response_deserializer=ExportLogsServiceResponse.FromString,
            )
            token = (("authorization", "Bearer s3cret"),)
            for metadata, payload, expected in [
                ((), body, grpc.StatusCode.UNAUTHENTICATED),
                (token, b"\xff\x00garbage", grpc.StatusCode.INVALID_ARGUMENT),
            ]:
                with pytest.raises(grpc.RpcError) as refused:
                    export(payload, metadata=metadata, timeout=10)
                assert refused.value.code() == expected
            export(body, metadata=token, timeout=10)  # accepted


def test_logs_that_arrive_after_their_trace_are_still_read(tmp_path):
    """Behind a Collector, spans and logs travel in separate pipelines: the spans may come
    first. Once the receiver has seen log records, a trace waits `log_wait` after its root."""
    with HttpNextHop() as hop:
        sidecar = _sidecar(tmp_path, hop, log_wait=5.0)  # ample for the steps below
        with sidecar:
            url = sidecar.http_url
            app_log = ExportLogsServiceRequest()  # the app's logs flow: an ordinary record
            app_log.resource_logs.add().scope_logs.add().log_records.add().body.string_value = "hi"
            protobuf = {"Content-Type": "application/x-protobuf"}
            posted = httpx.post(
                f"{url}/v1/logs", content=app_log.SerializeToString(), headers=protobuf
            )
            assert posted.status_code == 200
            held = _HeldLogs()
            ids = _app(HttpSpans(endpoint=f"{url}/v1/traces"), held)  # spans go out now
            wait_for(lambda: sidecar.counts()["spans_received"] >= 2, what="the spans")
            assert sidecar.counts()["traces_evaluated"] == 0  # waiting for its log records
            HttpLogs(endpoint=f"{url}/v1/logs").export(held.batch)
            wait_for(lambda: sidecar.counts()["traces_evaluated"] >= 1, what="the judged trace")
        _check(sidecar, hop, ids, app_records=1)


def test_the_first_trace_waits_for_logs_when_its_model_call_came_without_content(tmp_path):
    """No log record had arrived yet, so the first trace was judged as soon as its root
    ended: NONE, "turn content capture on", and its records, a moment later, unmatched."""
    with HttpNextHop() as hop:
        sidecar = _sidecar(tmp_path, hop, log_wait=5.0)  # ample for the steps below
        with sidecar:
            url = sidecar.http_url
            held = _HeldLogs()
            ids = _app(HttpSpans(endpoint=f"{url}/v1/traces"), held)  # spans go out first
            wait_for(lambda: sidecar.counts()["spans_received"] >= 2, what="the spans")
            assert sidecar.counts()["traces_evaluated"] == 0  # its content may be on its way
            HttpLogs(endpoint=f"{url}/v1/logs").export(held.batch)
            wait_for(lambda: sidecar.counts()["traces_evaluated"] >= 1, what="the judged trace")
        _check(sidecar, hop, ids)


class _HeldLogs(LogRecordExporter):
    """Keeps the app's log records instead of sending them, to send them after the spans."""

    def __init__(self) -> None:
        self.batch: list = []

    def export(self, batch):
        self.batch.extend(batch)
        return LogRecordExportResult.SUCCESS

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True

    def shutdown(self) -> None:
        pass


def test_odd_log_records_are_taken_and_forwarded(tmp_path):
    """A severity this SDK does not know and a GenAI body nested deep: answered 200, the
    record goes on, and the pipeline keeps going."""
    with HttpNextHop() as hop:
        sidecar = _sidecar(tmp_path, hop)
        with sidecar:
            request = ExportLogsServiceRequest()
            record = request.resource_logs.add().scope_logs.add().log_records.add()
            record.severity_number = 99
            record.event_name = "gen_ai.choice"
            record.trace_id, record.span_id = b"\x01" * 16, b"\x02" * 8
            value = record.body
            for _ in range(25):  # as deep as protobuf decodes (about 100 messages)
                value = value.kvlist_value.values.add(key="message").value
            value.string_value = "deep"
            reply = httpx.post(
                f"{sidecar.http_url}/v1/logs",
                content=request.SerializeToString(),
                headers={"Content-Type": "application/x-protobuf"},
                timeout=10,
            )
            assert reply.status_code == 200, reply.text
            wait_for(lambda: hop.logs(), what="the forwarded record")
        forwarded = hop.logs()[0].resource_logs[0].scope_logs[0].log_records[0]
        assert forwarded.event_name == "gen_ai.choice" and forwarded.severity_number == 0
        assert sidecar.engine.stats["log_events_received"] == 1


AWS_KEY = "AKIAIOSFODNN7EXAMPLE"


@pytest.mark.parametrize("redact", [True, False])
def test_forwarded_log_records_have_their_secrets_masked_as_spans_do(tmp_path, redact):
    """With redact_secrets on, forwarded spans were masked while the app's own log records
    went on carrying the key in clear."""
    answer = [{"role": "assistant", "parts": [{"type": "text", "content": f"key {AWS_KEY}"}]}]
    with GrpcNextHop() as hop, _sidecar(tmp_path, hop, redact_secrets=redact) as sidecar:
        provider = LoggerProvider(shutdown_on_exit=False)
        target = f"http://{sidecar.grpc_target}"
        provider.add_log_record_processor(BatchLogRecordProcessor(GrpcLogs(target, insecure=True)))
        provider.get_logger("app").emit(
            LogRecord(
                body=f"the model said {AWS_KEY}",
                event_name="gen_ai.client.inference.operation.details",
                attributes={"gen_ai.output.messages": json.dumps(answer)},
            )
        )
        provider.shutdown()
        wait_for(lambda: hop.logs(), what="the forwarded record")
        counted = sidecar.metrics.total("log_secrets_redacted")
    [record] = [
        record
        for request in hop.logs()
        for resource in request.resource_logs
        for scope in resource.scope_logs
        for record in scope.log_records
    ]
    text = str(record)
    assert (AWS_KEY in text) is not redact
    assert ("[REDACTED]" in text) is redact
    assert counted == (2 if redact else 0)
