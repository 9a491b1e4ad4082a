"""The OTLP codec must carry real SDK spans through files unchanged and survive damaged input."""

from __future__ import annotations

import base64
import gzip
import json
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    TraceFlags,
    format_span_id,
    format_trace_id,
)
from opentelemetry.trace.status import Status, StatusCode

from otel_safety.otlp import (
    Batch,
    OtlpDecodeError,
    OtlpJsonFileExporter,
    read_otlp_json,
    request_from_json,
    request_to_json,
    spans_from_request,
)

TRACE_HEX = "5b8efff798038103d269b633813fc60c"
REMOTE = SpanContext(
    trace_id=0x0AF7651916CD43DD8448EB211C80319C,
    span_id=0xB7AD6B7169203331,
    is_remote=True,
    trace_flags=TraceFlags(TraceFlags.SAMPLED),
)
LINKED = SpanContext(
    trace_id=0x1234567890ABCDEF1234567890ABCDEF,
    span_id=0x1122334455667788,
    is_remote=True,
    trace_flags=TraceFlags(TraceFlags.SAMPLED),
)
ROOT_ATTRIBUTES: dict[str, Any] = {
    "gen_ai.operation.name": "invoke_agent",
    "flag": True,
    "count": 42,
    "negative": -7,
    "ratio": 0.25,
    "raw": b"\x00\xffbytes",
    "ints": [1, 2, 3],
    "floats": [0.5, 1.5],
    "bools": [True, False],
    "tools": ("search", "shell"),
    "mixed": [1, "two", 3.0],
    "tool.call": {"name": "shell", "args": {"cmd": "rm -rf /", "timeout": 30}, "tags": ["x"]},
}


def _record_spans() -> list[ReadableSpan]:
    """A small agent run from a real SDK pipeline: nested spans, events, a link, an error."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(
        resource=Resource({"service.name": "checkout-agent", "deployment.env": "test"})
    )
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer(
        "otel_safety.tests", "0.1.0", schema_url="https://example.test/schema", attributes={"a": 1}
    )
    with tracer.start_as_current_span(
        "invoke_agent", kind=SpanKind.SERVER, attributes=ROOT_ATTRIBUTES
    ) as root:
        root.add_event("gen_ai.user.message", {"content": "delete everything"}, timestamp=123)
        with tracer.start_as_current_span(
            "chat model", kind=SpanKind.CLIENT, links=[Link(LINKED, {"link.reason": "retry"})]
        ) as chat:
            chat.set_attribute("gen_ai.usage.input_tokens", 17)
            chat.add_event("gen_ai.choice", {"index": 0, "finish": ("stop", "length")})
        with tracer.start_as_current_span("execute_tool shell") as tool:
            tool.set_status(Status(StatusCode.ERROR, "permission denied"))
    provider.shutdown()
    return list(memory.get_finished_spans())


def _remote_child() -> ReadableSpan:
    """A span whose parent came in over the wire, as a server's first span does."""
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    parent = trace.set_span_in_context(NonRecordingSpan(REMOTE))
    provider.get_tracer("t").start_span("handle request", context=parent).end()
    return memory.get_finished_spans()[0]


def _all_spans(batches: Sequence[Batch]) -> list[ReadableSpan]:
    return [span for batch in batches for span in batch.spans]


def _by_id(spans: Sequence[ReadableSpan]) -> dict[int, ReadableSpan]:
    return {span.context.span_id: span for span in spans}


def _assert_same_span(got: ReadableSpan, want: ReadableSpan) -> None:
    """Field by field, so a failure names exactly what the codec lost."""
    assert got.name == want.name
    assert got.context.trace_id == want.context.trace_id
    assert got.context.span_id == want.context.span_id
    assert got.context.trace_flags.sampled
    if want.parent is None:
        assert got.parent is None
    else:
        assert got.parent is not None
        assert got.parent.trace_id == want.parent.trace_id
        assert got.parent.span_id == want.parent.span_id
        assert got.parent.is_remote == want.parent.is_remote
    assert got.kind == want.kind
    assert got.start_time == want.start_time
    assert got.end_time == want.end_time
    assert got.status.status_code == want.status.status_code
    assert got.status.description == want.status.description
    assert dict(got.attributes) == dict(want.attributes)
    assert [(e.name, e.timestamp, dict(e.attributes)) for e in got.events] == [
        (e.name, e.timestamp, dict(e.attributes)) for e in want.events
    ]
    assert [_link_fields(link) for link in got.links] == [_link_fields(link) for link in want.links]
    assert dict(got.resource.attributes) == dict(want.resource.attributes)
    assert got.resource.schema_url == want.resource.schema_url
    assert got.instrumentation_scope == want.instrumentation_scope


def _link_fields(link: Link) -> tuple[int, int, bool, dict[str, Any]]:
    context = link.context
    return context.trace_id, context.span_id, context.is_remote, dict(link.attributes)


def _span_json(name: str, span_id: str, **extra: Any) -> dict[str, Any]:
    return {"traceId": TRACE_HEX, "spanId": span_id, "name": name, **extra}


def _request_json(*spans: dict[str, Any]) -> dict[str, Any]:
    return {"resourceSpans": [{"scopeSpans": [{"scope": {"name": "s"}, "spans": list(spans)}]}]}


def _jsonl(*documents: dict[str, Any]) -> str:
    return "".join(json.dumps(document) + "\n" for document in documents)


def _names(batch: Batch) -> list[str]:
    return [span.name for span in batch.spans]


# --- round trip ---------------------------------------------------------------------------------


def test_sdk_spans_round_trip_through_the_file_exporter(tmp_path: Path) -> None:
    recorded = [*_record_spans(), _remote_child()]
    path = tmp_path / "nested" / "dir" / "spans.jsonl"
    exporter = OtlpJsonFileExporter(path)
    assert exporter.export(recorded[:2]) is SpanExportResult.SUCCESS
    assert exporter.export(recorded[2:]) is SpanExportResult.SUCCESS
    exporter.shutdown()

    assert len(path.read_text(encoding="utf-8").splitlines()) == 2
    batches = list(read_otlp_json(path))
    assert [(batch.line, batch.error) for batch in batches] == [(1, None), (2, None)]
    decoded = _by_id(_all_spans(batches))
    assert len(decoded) == len(recorded) == 4
    for want in recorded:
        _assert_same_span(decoded[want.context.span_id], want)


def test_round_trip_keeps_structured_attribute_values() -> None:
    root = next(span for span in _record_spans() if span.name == "invoke_agent")
    (decoded,) = [
        span
        for span in spans_from_request(request_from_json(request_to_json([root])))
        if span.name == "invoke_agent"
    ]
    assert decoded.attributes["tool.call"] == {
        "name": "shell",
        "args": {"cmd": "rm -rf /", "timeout": 30},
        "tags": ("x",),
    }
    assert decoded.attributes["tools"] == ("search", "shell")
    assert decoded.attributes["mixed"] == (1, "two", 3.0)
    assert decoded.attributes["raw"] == b"\x00\xffbytes"
    assert decoded.attributes["negative"] == -7


def test_written_json_uses_hex_ids_camel_case_and_numeric_enums() -> None:
    spans = _record_spans()
    document = request_to_json(spans)
    scope_spans = document["resourceSpans"][0]["scopeSpans"][0]
    by_name = {span["name"]: span for span in scope_spans["spans"]}
    chat = by_name["chat model"]
    want = next(span for span in spans if span.name == "chat model")
    assert chat["traceId"] == format_trace_id(want.context.trace_id)
    assert chat["spanId"] == format_span_id(want.context.span_id)
    assert chat["parentSpanId"] == format_span_id(want.parent.span_id)
    assert chat["links"][0]["spanId"] == format_span_id(LINKED.span_id)
    assert chat["kind"] == 3
    assert by_name["execute_tool shell"]["status"] == {"code": 2, "message": "permission denied"}


def test_remote_parent_survives_the_sdk_round_trip() -> None:
    (decoded,) = spans_from_request(request_from_json(request_to_json([_remote_child()])))
    assert decoded.parent is not None
    assert decoded.parent.span_id == REMOTE.span_id
    assert decoded.parent.is_remote is True


@pytest.mark.parametrize(
    ("flags", "remote"),
    [(0x300, True), (0x301, True), (0x100, False), (0x200, False), (0, False)],
)
def test_parent_is_remote_only_when_both_flag_bits_say_so(flags: int, remote: bool) -> None:
    document = _request_json(
        _span_json("child", "00f067aa0ba902b7", parentSpanId="53995c3f42cd8ad8", flags=flags)
    )
    (span,) = spans_from_request(request_from_json(document))
    assert span.parent is not None
    assert span.parent.span_id == 0x53995C3F42CD8AD8
    assert span.parent.is_remote is remote


# --- request_from_json --------------------------------------------------------------------------


def test_request_from_json_accepts_field_names_enum_names_and_string_integers() -> None:
    document = {
        "resource_spans": [
            {
                "resource": {
                    "attributes": [{"key": "service.name", "value": {"string_value": "a"}}]
                },
                "scope_spans": [
                    {
                        "spans": [
                            {
                                "trace_id": TRACE_HEX.upper(),
                                "span_id": "00f067aa0ba902b7",
                                "parent_span_id": "",
                                "name": "call",
                                "kind": "SPAN_KIND_CLIENT",
                                "start_time_unix_nano": "1700000000000000000",
                                "end_time_unix_nano": 1700000000000000500,
                                "status": {"code": "STATUS_CODE_ERROR", "message": "boom"},
                                "unknown_field": "ignored",
                            }
                        ]
                    }
                ],
            }
        ]
    }
    (span,) = spans_from_request(request_from_json(document))
    assert span.context.trace_id == int(TRACE_HEX, 16)
    assert span.parent is None
    assert span.kind is SpanKind.CLIENT
    assert (span.start_time, span.end_time) == (1700000000000000000, 1700000000000000500)
    assert (span.status.status_code, span.status.description) == (StatusCode.ERROR, "boom")
    assert span.resource.attributes["service.name"] == "a"


def test_request_from_json_does_not_touch_the_callers_document() -> None:
    document = _request_json(_span_json("s", "00f067aa0ba902b7"))
    before = json.dumps(document)
    request_from_json(document)
    assert json.dumps(document) == before


def test_unspecified_kind_and_empty_values_decode_to_sdk_defaults() -> None:
    attributes = [
        {"key": "empty", "value": {}},
        {"key": "kept", "value": {"kvlistValue": {"values": [{"key": "gone", "value": {}}]}}},
    ]
    document = _request_json(_span_json("s", "00f067aa0ba902b7", kind=0, attributes=attributes))
    (span,) = spans_from_request(request_from_json(document))
    assert span.kind is SpanKind.INTERNAL
    assert dict(span.attributes) == {"kept": {}}
    assert span.status.status_code is StatusCode.UNSET


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ([], "expected a JSON object, got list"),
        (_request_json(_span_json("s", "xyz")), "resourceSpans[0].scopeSpans[0].spans[0].spanId"),
        (_request_json({**_span_json("s", "00f067aa0ba902b7"), "name": 5}), "name"),
        ({"resourceSpans": {"not": "a list"}}, "resourceSpans"),
    ],
)
def test_request_from_json_rejects_invalid_input_readably(document: Any, message: str) -> None:
    with pytest.raises(OtlpDecodeError) as caught:
        request_from_json(document)
    assert message in str(caught.value)


# --- reading files ------------------------------------------------------------------------------


def _spans_document(name: str) -> dict[str, Any]:
    spans = [span for span in _record_spans() if span.name == "invoke_agent"]
    document = request_to_json(spans)
    document["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["name"] = name
    return document


def test_bad_line_in_the_middle_costs_only_that_line(tmp_path: Path) -> None:
    path = tmp_path / "traces.jsonl"
    path.write_text(
        _jsonl(_spans_document("first"))
        + "\n"
        + '{"resourceSpans": [ truncated\n'
        + _jsonl(_spans_document("after"), {"resourceSpans": "oops"}, _spans_document("last")),
        encoding="utf-8",
    )
    batches = list(read_otlp_json(path))

    assert [batch.line for batch in batches] == [1, 3, 4, 5, 6]
    assert [_names(batch) for batch in batches] == [["first"], [], ["after"], [], ["last"]]
    assert batches[0].error is None
    assert batches[1].error is not None
    assert batches[1].error.startswith("line 3: invalid JSON: ")
    assert batches[3].error is not None
    assert batches[3].error.startswith("line 5: not an OTLP trace request: ")
    assert all(batch.source == str(path) for batch in batches)
    sizes = [batch.size for batch in batches]
    assert sizes == sorted(sizes)
    assert sizes[-1] == path.stat().st_size


def test_one_bad_value_costs_its_attribute_not_its_span_nor_the_lines_other_spans(
    tmp_path: Path,
) -> None:
    """The Collector writes a whole batch per line: an attribute protobuf refuses is dropped
    and named by its key and place, and its span (with its other attributes) and the spans
    beside it are kept. A span whose own field is bad still costs only that span."""
    ids = ["b7ad6b7169203331", "b7ad6b7169203332", "b7ad6b7169203333"]
    spans = [
        {
            "traceId": "0af7651916cd43dd8448eb211c80319c",
            "spanId": span_id,
            "name": name,
            "startTimeUnixNano": "1",
            "endTimeUnixNano": "2",
        }
        for span_id, name in zip(ids, ["bad value", "good", "bad start"], strict=True)
    ]
    spans[0]["attributes"] = [
        {"key": "n", "value": {"intValue": "notanint"}},
        {"key": "gen_ai.tool.name", "value": {"stringValue": "run_shell"}},
    ]
    spans[2]["startTimeUnixNano"] = [1]
    document = {"resourceSpans": [{"scopeSpans": [{"scope": {"name": "x"}, "spans": spans}]}]}
    path = tmp_path / "traces.jsonl"
    path.write_text(_jsonl(document), encoding="utf-8")
    [batch] = list(read_otlp_json(path))
    assert _names(batch) == ["bad value", "good"]
    assert dict(batch.spans[0].attributes) == {"gen_ai.tool.name": "run_shell"}
    assert batch.error is not None
    assert (
        "resourceSpans[0].scopeSpans[0].spans[0]: attribute 'n' dropped: intValue: "
        "invalid literal for int() with base 10: 'notanint'"
    ) in batch.error
    assert "resourceSpans[0].scopeSpans[0].spans[2] dropped" in batch.error


def test_a_bare_attribute_value_is_read_as_its_anyvalue_and_named(tmp_path: Path) -> None:
    """`"value": "rm -rf /"` instead of `{"stringValue": ...}` (a hand-written or converted
    file): protobuf's reader dropped the attribute without a word, and the span was judged
    without its arguments. It is read as the AnyValue of its type, and the line says so."""
    span = {
        "traceId": "0af7651916cd43dd8448eb211c80319c",
        "spanId": "b7ad6b7169203331",
        "name": "execute_tool run_shell",
        "attributes": [
            {"key": "gen_ai.tool.call.arguments", "value": '{"command": "rm -rf /"}'},
            {"key": "retries", "value": 2},
            {"key": "dry_run", "value": False},
            {"key": "parts", "value": ["a"]},
        ],
        "events": [{"name": "e", "attributes": [{"key": "score", "value": 0.5}]}],
    }
    document = {"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}
    path = tmp_path / "traces.jsonl"
    path.write_text(_jsonl(document), encoding="utf-8")
    [batch] = list(read_otlp_json(path))
    [decoded] = batch.spans
    assert dict(decoded.attributes) == {
        "gen_ai.tool.call.arguments": '{"command": "rm -rf /"}',
        "retries": 2,
        "dry_run": False,
    }
    assert dict(decoded.events[0].attributes) == {"score": 0.5}
    where = "resourceSpans[0].scopeSpans[0].spans[0]"
    assert batch.error is not None
    assert (
        f"{where}: attribute 'gen_ai.tool.call.arguments' is a bare string, not an AnyValue "
        'object ({"stringValue": ...}); read as one'
    ) in batch.error
    assert f"{where}: attribute 'parts' dropped: a list, not an AnyValue object" in batch.error
    assert f"{where}.events[0]: attribute 'score' is a bare number" in batch.error
    assert json.loads(path.read_text())["resourceSpans"][0]["scopeSpans"][0]["spans"] == [span]


def test_a_list_of_the_wrong_type_is_named_briefly_and_the_blocks_beside_it_kept(
    tmp_path: Path,
) -> None:
    """A scope whose `spans` is an object (2,000 of them keyed by number) is named with its
    place and type, not quoted whole; the spans of the next scope are kept, each named on
    its own place (spans[1], not the spans[0] of the one-span request it was decoded as)."""
    trace_id = "0af7651916cd43dd8448eb211c80319c"

    def span(number: int, name: str, start: object = "1") -> dict:
        return {
            "traceId": trace_id,
            "spanId": f"{number:016x}",
            "name": name,
            "startTimeUnixNano": start,
            "endTimeUnixNano": "2",
        }

    keyed = {str(n): span(n + 100, "lost") for n in range(2000)}
    good = [span(1, "good"), span(2, "bad", start=[1]), span(3, "also good")]
    document = {
        "resourceSpans": [
            {"scopeSpans": [{"spans": keyed}, {"scope": {"name": "x"}, "spans": good}]}
        ]
    }
    path = tmp_path / "traces.jsonl"
    path.write_text(_jsonl(document), encoding="utf-8")
    [batch] = list(read_otlp_json(path))
    assert _names(batch) == ["good", "also good"]
    assert batch.error is not None and len(batch.error) < 1_000
    assert "scopeSpans[0].spans dropped: expected a list, got an object of 2000 keys" in batch.error
    assert "resourceSpans[0].scopeSpans[1].spans[1] dropped" in batch.error
    assert "spans[0]" not in batch.error.split("spans[1] dropped", 1)[1]


def test_a_bad_id_is_named_at_its_own_span_and_a_base64_one_says_ids_are_hex(
    tmp_path: Path,
) -> None:
    """The span with the bad id is named by its place in the file, the field by its name
    (not the spans[0] of the one-span request it was decoded as); an id in base64, as
    protobuf's MessageToDict writes it, is told apart with what OTLP/JSON wants instead."""
    trace_id = "0af7651916cd43dd8448eb211c80319c"
    in_base64 = base64.b64encode(bytes.fromhex("00f067aa0ba902b7")).decode()

    def span(span_id: str, name: str) -> dict:
        return {"traceId": trace_id, "spanId": span_id, "name": name}

    spans = [span("00f067aa0ba902b1", "good"), span("zzzz", "bad"), span(in_base64, "b64")]
    path = tmp_path / "traces.jsonl"
    path.write_text(_jsonl({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}))
    [batch] = list(read_otlp_json(path))
    assert _names(batch) == ["good"]
    assert "resourceSpans[0].scopeSpans[0].spans[1] dropped: spanId: not a hex id: 'zzzz'" in (
        batch.error or ""
    )
    assert (
        "resourceSpans[0].scopeSpans[0].spans[2] dropped: spanId: not a hex id: "
        f"{in_base64!r} (base64 for 00f067aa0ba902b7: OTLP/JSON writes trace and span ids "
        "in hex)"
    ) in (batch.error or "")


def test_spans_dropped_alike_are_said_once_with_their_count(tmp_path: Path) -> None:
    """Every id of a file in base64: one line per kind of problem, not one per span (140
    spans made a 27 KB line)."""
    spans = [
        {
            "traceId": base64.b64encode(bytes(range(16))).decode(),
            "spanId": base64.b64encode(bytes([n] * 8)).decode(),
            "name": f"s{n}",
        }
        for n in range(1, 41)
    ]
    path = tmp_path / "traces.jsonl"
    path.write_text(_jsonl({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}))
    [batch] = list(read_otlp_json(path))
    assert _names(batch) == []
    error = batch.error or ""
    assert error.startswith(
        "line 1: 40 alike dropped, resourceSpans[0].scopeSpans[0].spans[0] to "
        "resourceSpans[0].scopeSpans[0].spans[39]; the first: traceId: not a hex id: "
    )
    assert error.count("base64 for") == 1 and len(error) < 400


def test_pretty_printed_single_document(tmp_path: Path) -> None:
    path = tmp_path / "trace.json"
    recorded = _record_spans()
    path.write_text("\n" + json.dumps(request_to_json(recorded), indent=2), encoding="utf-8")
    (batch,) = read_otlp_json(path)
    assert (batch.line, batch.error) == (2, None)
    decoded = _by_id(batch.spans)
    for want in recorded:
        _assert_same_span(decoded[want.context.span_id], want)


def test_pretty_printed_documents_back_to_back_keep_their_line_numbers(tmp_path: Path) -> None:
    path = tmp_path / "traces.json"
    first = json.dumps(_spans_document("one"), indent=2)
    path.write_text(first + "\n" + json.dumps(_spans_document("two"), indent=2), encoding="utf-8")
    batches = list(read_otlp_json(path))
    assert [(batch.line, _names(batch)) for batch in batches] == [
        (1, ["one"]),
        (first.count("\n") + 2, ["two"]),
    ]


def test_damaged_first_line_does_not_hide_the_json_lines_after_it(tmp_path: Path) -> None:
    path = tmp_path / "cut.jsonl"
    whole = json.dumps(_spans_document("lost"))
    path.write_text(
        whole[len(whole) // 2 :] + "\n" + _jsonl(_spans_document("a"), _spans_document("b")),
        encoding="utf-8",
    )
    batches = list(read_otlp_json(path))
    assert [_names(batch) for batch in batches] == [[], ["a"], ["b"]]
    assert batches[0].error is not None
    assert batches[0].error.startswith("line 1: ")


def test_json_lines_with_a_bad_first_line_and_no_spans_name_every_bad_line(
    tmp_path: Path,
) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(
        '{"resourceSpans": [ broken\n{"resourceSpans": [ also broken\n{"resourceMetrics": []}\n',
        encoding="utf-8",
    )
    batches = list(read_otlp_json(path))
    assert [batch.line for batch in batches] == [1, 2, 3]
    assert [batch.error.split(":")[0] for batch in batches if batch.error] == [
        "line 1",
        "line 2",
        "line 3",
    ]
    assert "resourceMetrics" in (batches[2].error or "")


def test_a_broken_pretty_printed_document_is_one_error_not_one_per_line(tmp_path: Path) -> None:
    path = tmp_path / "cut.json"
    text = json.dumps(_spans_document("cut"), indent=2)
    path.write_text(text[: len(text) // 2], encoding="utf-8")
    (batch,) = read_otlp_json(path)
    assert batch.spans == [] and batch.error is not None and "invalid JSON" in batch.error


def test_gzip_file(tmp_path: Path) -> None:
    path = tmp_path / "traces.jsonl.gz"
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        handle.write(_jsonl(_spans_document("one"), _spans_document("two")))
    batches = list(read_otlp_json(path))
    assert [(batch.line, _names(batch), batch.error) for batch in batches] == [
        (1, ["one"], None),
        (2, ["two"], None),
    ]
    assert batches[-1].size == path.stat().st_size


def test_truncated_gzip_keeps_what_was_readable(tmp_path: Path) -> None:
    documents = [_spans_document(f"span {index}") for index in range(200)]
    compressed = gzip.compress(_jsonl(*documents).encode())
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(compressed[: len(compressed) - 200])
    batches = list(read_otlp_json(path))
    assert len(_all_spans(batches)) > 100
    assert batches[-1].error is not None
    assert "unreadable input" in batches[-1].error


def test_non_utf8_bytes_inside_a_string_value(tmp_path: Path) -> None:
    document = _spans_document("latin")
    span = document["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    span["attributes"].append({"key": "prompt", "value": {"stringValue": "caf@@"}})
    line = json.dumps(document).encode().replace(b"@@", b"\xe9\xff")
    path = tmp_path / "mixed.jsonl"
    path.write_bytes(line + b"\n" + _jsonl(_spans_document("clean")).encode())
    batches = list(read_otlp_json(path))
    assert [(_names(batch), batch.error) for batch in batches] == [
        (["latin"], None),
        (["clean"], None),
    ]
    assert batches[0].spans[0].attributes["prompt"] == "caf\ufffd\ufffd"


def test_numbers_python_cannot_hold_cost_only_their_line(tmp_path: Path) -> None:
    """A 5000-digit number is one bad line, not a crash; an integer too large for a double
    costs its attribute only."""
    huge = "1" * 5000
    too_large_double = _request_json(
        _span_json(
            "big", "00f067aa0ba902b7", attributes=[{"key": "k", "value": {"doubleValue": 10**400}}]
        )
    )
    path = tmp_path / "numbers.jsonl"
    path.write_text(
        _jsonl(_spans_document("first"))
        + f'{{"resourceSpans": [], "n": {huge}}}\n'
        + _jsonl(too_large_double, _spans_document("last")),
        encoding="utf-8",
    )
    batches = list(read_otlp_json(path))
    assert [(batch.line, _names(batch)) for batch in batches] == [
        (1, ["first"]),
        (2, []),
        (3, ["big"]),
        (4, ["last"]),
    ]
    assert (batches[1].error or "").startswith("line 2: invalid JSON: Exceeds the limit")
    assert batches[2].error == (
        "line 3: resourceSpans[0].scopeSpans[0].spans[0]: attribute 'k' dropped: "
        "int too large to convert to float"
    )


def test_a_first_line_with_a_number_too_long_is_still_read_as_json_lines(tmp_path: Path) -> None:
    path = tmp_path / "numbers.jsonl"
    path.write_text(
        '{"n": ' + "1" * 5000 + "}\n" + _jsonl(_spans_document("a"), _spans_document("b")),
        encoding="utf-8",
    )
    batches = list(read_otlp_json(path))
    assert [_names(batch) for batch in batches] == [[], ["a"], ["b"]]
    assert (batches[0].error or "").startswith("line 1: invalid JSON: Exceeds the limit")


def test_lone_surrogate_escape_is_replaced_not_fatal(tmp_path: Path) -> None:
    document = _request_json(
        _span_json(
            "cut", "00f067aa0ba902b7", attributes=[{"key": "k", "value": {"stringValue": "x"}}]
        )
    )
    text = json.dumps(document).replace('"stringValue": "x"', '"stringValue": "emoji \\ud83d"')
    path = tmp_path / "surrogate.jsonl"
    path.write_text(text + "\n", encoding="utf-8")
    (batch,) = read_otlp_json(path)
    assert batch.error is None
    assert batch.spans[0].attributes["k"] == "emoji \ufffd"


def test_span_with_short_id_is_rejected_while_its_sibling_survives(tmp_path: Path) -> None:
    document = _request_json(
        _span_json("broken", "abcdef"),
        _span_json("sibling", "00f067aa0ba902b7"),
    )
    path = tmp_path / "ids.jsonl"
    path.write_text(_jsonl(document), encoding="utf-8")
    (batch,) = read_otlp_json(path)
    assert _names(batch) == ["sibling"]
    assert batch.error == "line 1: span 'broken' rejected: span_id must be 8 bytes, got 3"


def test_bad_link_is_dropped_but_its_span_is_kept() -> None:
    links = [
        {"traceId": TRACE_HEX, "spanId": "00"},
        {"traceId": TRACE_HEX, "spanId": "53995c3f42cd8ad8", "flags": 0x300},
    ]
    problems: list[str] = []
    document = _request_json(_span_json("s", "00f067aa0ba902b7", links=links))
    (span,) = spans_from_request(request_from_json(document), problems)
    assert [(link.context.span_id, link.context.is_remote) for link in span.links] == [
        (0x53995C3F42CD8AD8, True)
    ]
    assert problems == ["span 's': link 0 dropped: link span_id must be 8 bytes, got 1"]


def test_all_zero_ids_are_rejected_but_an_all_zero_parent_means_root() -> None:
    problems: list[str] = []
    document = _request_json(
        _span_json("zero", "0000000000000000"),
        _span_json("root", "00f067aa0ba902b7", parentSpanId="0000000000000000"),
    )
    spans = spans_from_request(request_from_json(document), problems)
    assert [(span.name, span.parent) for span in spans] == [("root", None)]
    assert problems == ["span 'zero' rejected: span_id is all zeros"]


# --- the exporter -------------------------------------------------------------------------------


def test_exporter_is_thread_safe_and_refuses_after_shutdown(tmp_path: Path) -> None:
    spans = _record_spans()
    path = tmp_path / "out.jsonl"
    exporter = OtlpJsonFileExporter(path)
    results: list[SpanExportResult] = []

    def export_many() -> None:
        results.extend(exporter.export(spans) for _ in range(25))

    threads = [threading.Thread(target=export_many) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert exporter.force_flush()
    exporter.shutdown()

    assert results == [SpanExportResult.SUCCESS] * 100
    batches = list(read_otlp_json(path))
    assert len(batches) == 100
    assert all(batch.error is None and len(batch.spans) == len(spans) for batch in batches)
    assert exporter.export(spans) is SpanExportResult.FAILURE


def test_dropped_counts_from_the_producer_survive_decoding_and_re_encoding() -> None:
    event = {"name": "e", "timeUnixNano": "5", "droppedAttributesCount": 4}
    span = _span_json(
        "s",
        "00f067aa0ba902b7",
        attributes=[{"key": "k", "value": {"intValue": "1"}}],
        droppedAttributesCount=3,
        events=[event],
        droppedEventsCount=2,
        droppedLinksCount=1,
    )
    (decoded,) = spans_from_request(request_from_json(_request_json(span)))
    assert (decoded.dropped_attributes, decoded.dropped_events, decoded.dropped_links) == (3, 2, 1)
    assert decoded.events[0].dropped_attributes == 4
    assert decoded.events[0].timestamp == 5

    again = request_to_json([decoded])["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    assert again["droppedAttributesCount"] == 3
    assert again["droppedEventsCount"] == 2
    assert again["droppedLinksCount"] == 1


def test_a_line_cut_short_is_called_so(tmp_path: Path) -> None:
    """A line cut inside its JSON said only "Unterminated string" or "Invalid control
    character", which does not tell the user the file was truncated; a line bad in its
    middle gets no such guess."""
    whole = json.dumps(_spans_document("cut"))
    path = tmp_path / "cut.jsonl"
    path.write_text(whole[:120] + "\n" + '{"resourceSpans": [}\n', encoding="utf-8")
    cut, bad = list(read_otlp_json(path))
    assert (cut.error or "").endswith("the line ends before its JSON does: was it cut short?")
    assert "cut short" not in (bad.error or "") and "invalid JSON" in (bad.error or "")
