"""Spans parked while detection is behind come back as they were, and out of the collector's
way (otel_safety.parking)."""

from __future__ import annotations

import gc

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    set_span_in_context,
)
from opentelemetry.trace.span import TraceState

from otel_safety.parking import is_parked, park, unpark


def _spans() -> list[ReadableSpan]:
    """Ended SDK spans with everything a span can carry: events, links, an error status,
    kinds, a remote parent with a trace state, and attributes and events over the limits."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(
        resource=Resource.create({"service.name": "parking", "deployment": "test"}),
        span_limits=SpanLimits(max_span_attributes=3, max_events=2),
    )
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("tests", "1.2", schema_url="https://example.com/schema")
    remote = SpanContext(
        0x5B8EFFF798038103D269B633813FC60C,
        0xEEE19B7EC3C1B174,
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
        trace_state=TraceState([("vendor", "value")]),
    )
    with tracer.start_as_current_span(
        "invoke_agent ops",
        context=set_span_in_context(NonRecordingSpan(remote)),
        kind=SpanKind.SERVER,
        attributes={"gen_ai.operation.name": "invoke_agent", "tags": ("a", "b")},
        links=[Link(remote, {"why": "follows"})],
    ):
        with tracer.start_as_current_span("chat", kind=SpanKind.CLIENT) as chat:
            chat.set_attributes({"a": 1, "b": 2.5, "c": True, "d": "over the limit"})
            chat.add_event("gen_ai.choice", {"index": 0}, timestamp=123)
            chat.add_event("second")
            chat.add_event("third, over the limit")
            chat.set_status(Status(StatusCode.ERROR, "model timed out"))
        with tracer.start_as_current_span("execute_tool run_shell") as tool:
            tool.set_attribute("gen_ai.tool.name", "run_shell")
    with tracer.start_as_current_span("plain root"):
        pass
    spans = list(exporter.get_finished_spans())
    provider.shutdown()
    return spans


def test_a_parked_span_comes_back_exporting_byte_for_byte_the_same():
    spans = _spans()
    parked = [park(span) for span in spans]
    assert all(is_parked(item) for item in parked)
    back = [unpark(item) for item in parked]
    assert encode_spans(back).SerializeToString() == encode_spans(spans).SerializeToString()
    assert [(s.context, s.parent) for s in back] == [(s.context, s.parent) for s in spans]
    assert back[1].parent.trace_state == {"vendor": "value"}  # not in OTLP, kept all the same
    chat = next(span for span in back if span.name == "chat")
    assert (chat.dropped_attributes, chat.dropped_events) == (1, 1)  # the limits' counts
    assert back[0].resource is spans[0].resource  # shared objects come back themselves


def test_a_parked_span_is_one_object_the_collector_stops_tracking():
    plain = next(span for span in _spans() if span.name == "plain root")
    parked = park(plain)
    gc.collect()
    assert not gc.is_tracked(parked)


def test_a_span_it_cannot_take_apart_is_kept_as_it_is():
    class Custom(ReadableSpan):
        pass

    custom = Custom("custom")
    assert park(custom) is custom


def test_a_span_made_from_otlp_with_plain_attributes_comes_back_whole():
    from otel_safety.detection_worker import span_from_wire, span_to_wire

    rebuilt = [span_from_wire(span_to_wire(span)) for span in _spans()]  # dict attributes
    assert all(type(span._attributes) is dict for span in rebuilt)
    parked = [park(span) for span in rebuilt]
    assert all(is_parked(item) for item in parked)
    back = [unpark(item) for item in parked]
    assert encode_spans(back).SerializeToString() == encode_spans(rebuilt).SerializeToString()
