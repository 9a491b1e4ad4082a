"""`ingest` reads OTLP/JSON logs requests too: the GenAI events an EVENT_ONLY app sends as
log records are judged with their spans, as `serve` judges them.

The spans come from a real SDK tracer and are written as the Collector's file exporter
writes OTLP/JSON; the logs request is written the same way, hex ids and all.
"""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_safety.config import Settings
from otel_safety.ingest import ingest_files
from otel_safety.otlp import request_to_json

OUTPUT = [
    {
        "role": "assistant",
        "parts": [
            {
                "type": "tool_call",
                "id": "c1",
                "name": "run_shell",
                "arguments": {"command": "rm -rf /"},
            }
        ],
    }
]


def _run() -> tuple[dict, dict]:
    """An agent run whose model call carries no content, and the log record that does."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("app")
    with (
        tracer.start_as_current_span("agent run"),
        tracer.start_as_current_span(
            "chat fake", attributes={"gen_ai.operation.name": "chat"}
        ) as chat,
    ):
        context = chat.get_span_context()
    provider.shutdown()
    record = {
        "traceId": format(context.trace_id, "032x"),
        "spanId": format(context.span_id, "016x"),
        "eventName": "gen_ai.client.inference.operation.details",
        "attributes": [
            {"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
            {"key": "gen_ai.output.messages", "value": {"stringValue": json.dumps(OUTPUT)}},
        ],
    }
    logs = {"resourceLogs": [{"scopeLogs": [{"logRecords": [record]}]}]}
    return request_to_json(list(exporter.get_finished_spans())), logs


def _ingest(tmp_path: Path, *files: Path):
    db = tmp_path / "store.duckdb"
    summary = ingest_files(
        [str(f) for f in files], Settings.resolve(environ={}, db_path=str(db), workers=0)
    )
    with duckdb.connect(str(db), read_only=True) as con:
        levels = con.execute("SELECT escalation_level FROM traces").fetchall()
    return summary, levels


@pytest.mark.parametrize("layout", ["one file, logs last", "two files, traces named first"])
def test_log_events_in_the_input_are_judged_with_their_spans(tmp_path, layout):
    traces, logs = _run()
    if layout == "one file, logs last":
        both = tmp_path / "export.jsonl"
        both.write_text(json.dumps(traces) + "\n" + json.dumps(logs) + "\n")
        files = [both]
    else:
        (tmp_path / "traces.jsonl").write_text(json.dumps(traces) + "\n")
        (tmp_path / "logs.jsonl").write_text(json.dumps(logs) + "\n")
        files = [tmp_path / "traces.jsonl", tmp_path / "logs.jsonl"]
    summary, levels = _ingest(tmp_path, *files)
    assert levels == [("HARD_STOP",)]
    assert summary.bad_lines == []
    assert (summary.log_events, summary.unmatched_events) == (1, 0)
    assert "GenAI log events read with their spans: 1 of 1" in summary.describe("store")


def test_events_of_spans_not_in_the_input_are_counted(tmp_path):
    traces, logs = _run()
    logs["resourceLogs"][0]["scopeLogs"][0]["logRecords"][0]["traceId"] = "ab" * 16
    (tmp_path / "all.jsonl").write_text(json.dumps(traces) + "\n" + json.dumps(logs) + "\n")
    summary, levels = _ingest(tmp_path, tmp_path / "all.jsonl")
    assert levels == [("NONE",)]
    assert (summary.log_events, summary.unmatched_events) == (1, 1)
    assert "the rest name spans the input does not hold" in summary.describe("store")


def test_a_damaged_gzip_file_is_reported_not_raised(tmp_path):
    """The look for logs at a file's start raised on a .gz whose data is corrupt, before
    the reader could name the bad input."""
    traces, _ = _run()
    good = tmp_path / "traces.jsonl"
    good.write_text(json.dumps(traces) + "\n")
    bad = tmp_path / "bad.jsonl.gz"
    bad.write_bytes(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03garbage bytes")
    summary, levels = _ingest(tmp_path, bad, good)
    assert levels == [("NONE",)]
    assert any("unreadable input" in line for line in summary.bad_lines), summary.bad_lines
