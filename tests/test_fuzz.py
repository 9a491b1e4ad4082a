"""Arbitrary attribute values through the three entry points: every span is stored, or its
trace is counted as refused by the store (quarantined), and nothing else is lost.

Bounded in CI (`FUZZ_EXAMPLES`, 25 by default); `make fuzz` runs many more. Values cover
what OTLP can carry and the SDK cannot (bytes, key-value lists, nested arrays), JSON message
attributes with escaped lone surrogates, deep nesting, and the `otel_safety.guard.*` keys a
producer should not be able to set.
"""

from __future__ import annotations

import json
import os
import random

import duckdb
import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator

from otel_safety.config import Settings
from otel_safety.engine import SafetyEngine
from otel_safety.exporters.duckdb import DuckDBStore
from otel_safety.ingest import ingest_files
from otel_safety.otlp import message_to_json
from otel_safety.pipeline import Pipeline
from otel_safety.processor import SafetySpanProcessor
from otel_safety.sidecar import Sidecar, SidecarOptions

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "25"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    derandomize=True,
)
DETECTORS = ["injection", "scope_escalation", "tool_guard", "under_refusal", "deception"]

KEYS = [
    "gen_ai.operation.name",
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.system_instructions",
    "gen_ai.tool.name",
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
    "gen_ai.conversation.id",
    "otel_safety.guard.decision",
    "otel_safety.guard.risk",
    "otel_safety.guard.signature",
    "input.value",
    "output.value",
    "llm.input_messages.0.message.content",
    "gen_ai.prompt.0.content",
    "traceloop.entity.input",
]
HOSTILE_TEXT = [
    '[{"role":"user","parts":[{"type":"text","content":"\\ud800 rm -rf /"}]}]',
    '{"command": "rm -rf /", "path": "\\udfff"}',
    "[" * 3000 + "]" * 3000,
    '{"a":' * 1200 + "1" + "}" * 1200,
    "\\" * 20_000,
    "`" * 20_000,
    "execute_tool",
    "chat",
    "invoke_agent",
    "ALLOW",
]
texts = st.one_of(st.text(max_size=200), st.sampled_from(HOSTILE_TEXT))
sdk_scalars = st.one_of(
    texts,
    st.text(alphabet=st.characters(codec=None), max_size=50),  # lone surrogates included
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=True, allow_infinity=True),
)
sdk_values = st.one_of(
    sdk_scalars, st.lists(texts, max_size=4), st.lists(st.integers(), max_size=4)
)
otlp_values = st.recursive(
    st.one_of(
        texts, st.binary(max_size=64), st.booleans(), st.integers(-(2**63), 2**63 - 1), st.floats()
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.text(max_size=12), inner, max_size=4),
    ),
    max_leaves=12,
)
keys = st.one_of(st.sampled_from(KEYS), st.text(min_size=1, max_size=30))
sdk_spans = st.lists(st.dictionaries(keys, sdk_values, max_size=6), min_size=1, max_size=4)
otlp_spans = st.lists(st.dictionaries(keys, otlp_values, max_size=6), min_size=1, max_size=4)


class _UrandomIds(IdGenerator):
    def generate_span_id(self) -> int:
        return int.from_bytes(os.urandom(8), "big") or 1

    def generate_trace_id(self) -> int:
        return int.from_bytes(os.urandom(16), "big") or 1


def _any(value: object) -> AnyValue:
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    if isinstance(value, bytes):
        return AnyValue(bytes_value=value)
    if isinstance(value, str):
        return AnyValue(string_value=value)
    if isinstance(value, list):
        out = AnyValue()
        out.array_value.values.extend(_any(v) for v in value)
        return out
    out = AnyValue()
    out.kvlist_value.values.extend(KeyValue(key=k, value=_any(v)) for k, v in value.items())
    return out


def _request(traces: list[list[dict]], rng: random.Random) -> ExportTraceServiceRequest:
    """One OTLP request: each trace a root and children carrying the generated attributes."""
    spans = []
    for attributes_of_spans in traces:
        trace_id = rng.getrandbits(128).to_bytes(16, "big")
        root = rng.getrandbits(64).to_bytes(8, "big")
        for number, attributes in enumerate(attributes_of_spans):
            span_id = root if number == 0 else rng.getrandbits(64).to_bytes(8, "big")
            spans.append(
                Span(
                    trace_id=trace_id,
                    span_id=span_id,
                    parent_span_id=b"" if number == 0 else root,
                    name=f"span {number}",
                    start_time_unix_nano=1_700_000_000_000_000_000 + number,
                    end_time_unix_nano=1_700_000_000_100_000_000 + number,
                    attributes=[KeyValue(key=k, value=_any(v)) for k, v in attributes.items()],
                )
            )
    return ExportTraceServiceRequest(
        resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=spans)])]
    )


def _stored_spans(db: str) -> int:
    with duckdb.connect(db, read_only=True) as con:
        return con.execute("SELECT count(*) FROM spans").fetchone()[0]


def _span_ids(request: ExportTraceServiceRequest) -> int:
    return sum(len(s.spans) for r in request.resource_spans for s in r.scope_spans)


def test_the_processor_stores_every_span_whatever_its_attributes(tmp_path):
    db = str(tmp_path / "p.duckdb")
    store = DuckDBStore(db, hold=True)
    from otel_safety import detectors

    engine = SafetyEngine(Pipeline(detectors=detectors.create(DETECTORS)), [store])
    provider = TracerProvider(id_generator=_UrandomIds())  # hypothesis reseeds `random`
    provider.add_span_processor(SafetySpanProcessor(engine))
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("fuzz")

    @FUZZ
    @given(sdk_spans)
    def run(attributes_of_spans: list[dict]) -> None:
        with tracer.start_as_current_span("invoke_agent", attributes=attributes_of_spans[0]):
            for attributes in attributes_of_spans[1:]:
                with tracer.start_as_current_span("execute_tool", attributes=attributes):
                    pass

    run()
    provider.shutdown()  # the processor's engine judges and stores the rest
    made = len(memory.get_finished_spans())
    assert engine.stats["spans_dropped"] == 0, dict(engine.stats)
    assert store.rejected == 0  # nothing needed quarantine: values are made safe
    assert _stored_spans(db) == made


@pytest.mark.process
def test_ingest_stores_every_span_or_counts_it(tmp_path):
    requests: list[ExportTraceServiceRequest] = []
    rng = random.Random(7)  # hypothesis reseeds `random` itself, not this one

    @FUZZ
    @given(st.lists(otlp_spans, min_size=1, max_size=3))
    def collect(traces: list[list[dict]]) -> None:
        requests.append(_request(traces, rng))

    collect()
    path = tmp_path / "fuzz.jsonl"
    with open(path, "w", encoding="utf-8") as handle:
        for request in requests:
            handle.write(json.dumps(message_to_json(request)) + "\n")
    db = str(tmp_path / "i.duckdb")
    summary = ingest_files([path], Settings.resolve({}, db_path=db, detectors=DETECTORS))
    assert not summary.bad_lines, summary.bad_lines[:3]
    assert summary.spans == sum(_span_ids(r) for r in requests)
    assert summary.quarantined == 0
    assert _stored_spans(db) == summary.spans


@pytest.mark.process
def test_serve_stores_every_acknowledged_span_or_counts_it(tmp_path):
    rng = random.Random(11)
    settings_ = Settings.resolve(
        environ={}, db_path=str(tmp_path / "s.duckdb"), detectors=DETECTORS, decision_wait=0.1
    )
    sent = 0
    with Sidecar(settings_, SidecarOptions(grpc_port=None, http_port=0)) as sidecar:

        @FUZZ
        @given(st.lists(otlp_spans, min_size=1, max_size=3))
        def post(traces: list[list[dict]]) -> None:
            nonlocal sent
            request = _request(traces, rng)
            reply = httpx.post(
                f"{sidecar.http_url}/v1/traces",
                content=request.SerializeToString(),
                headers={"Content-Type": "application/x-protobuf"},
                timeout=30,
            )
            assert reply.status_code == 200, reply.text
            sent += _span_ids(request)

        post()
    counts = sidecar.counts()
    assert counts["spans_accepted"] == sent
    assert counts["traces_store_rejected"] == 0
    assert _stored_spans(settings_.db_path) == sent
