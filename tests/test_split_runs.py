"""A run split by a pause: the part without the root is judged first, the root's part later.

The root span must carry the run's verdict (a tail sampler keeps or drops the run by it), and
the store must hold one row for the run. Spans come from a real SDK tracer, go through the
engine as the processor and `serve` feed it, and out to an in-memory exporter and a real
DuckDB file.
"""

from __future__ import annotations

import json

import duckdb
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from test_trace_fragments import _parts, _run

from otel_safety import semconv as sc
from otel_safety.engine import ExporterSink, SafetyEngine
from otel_safety.exporters.duckdb import DuckDBStore
from otel_safety.pipeline import Pipeline


def test_the_roots_part_judged_after_a_stricter_part_carries_the_runs_level(tmp_path):
    path = str(tmp_path / "s.duckdb")
    exporter = InMemorySpanExporter()
    engine = SafetyEngine(
        Pipeline(["tool_guard"]),
        [ExporterSink(exporter), DuckDBStore(path)],
        background=False,
        decision_wait=30,
    )
    root_part, tool_part = _parts(_run("rm -rf /"), "execute_tool run_shell")
    engine.process(tool_part, now=0.0)
    engine.process([], now=31.0)  # no span of it for the decision wait: judged as it is
    engine.process(root_part, now=40.0)  # the root ends after the pause
    engine.shutdown()
    exported = {span.name: span for span in exporter.get_finished_spans()}
    root = exported["invoke_agent ops"].attributes
    assert root[sc.OTEL_SAFETY_TRACE_ESCALATION_LEVEL] == "HARD_STOP"
    assert root[sc.OTEL_SAFETY_TRACE_DETECTORS_FIRED] == ("tool_guard",)
    assert root[sc.OTEL_SAFETY_TRACE_EVALUATION_REASON] == "root_ended"
    assert sc.OTEL_SAFETY_TRACE_ESCALATION_BY_POLICY not in root  # a finding explains it
    assert engine.stats["parts_raised_to_run_level"] == 1
    with duckdb.connect(path, read_only=True) as con:
        rows = con.execute(
            "SELECT escalation_level, detectors_fired, escalation_by_policy, span_count, "
            "fragment FROM traces"
        ).fetchall()
    [(level, fired, by_policy, spans, fragment)] = rows
    assert (level, json.loads(fired), by_policy, spans, fragment) == (
        "HARD_STOP",
        ["tool_guard"],
        False,
        4,
        False,
    )


def test_a_calm_earlier_part_leaves_a_later_part_as_judged(tmp_path):
    exporter = InMemorySpanExporter()
    engine = SafetyEngine(
        Pipeline(["tool_guard"]), [ExporterSink(exporter)], background=False, decision_wait=30
    )
    root_part, tool_part = _parts(_run("ls -la"), "execute_tool run_shell")
    engine.process(tool_part, now=0.0)
    engine.process([], now=31.0)
    engine.process(root_part, now=40.0)
    engine.shutdown()
    exported = {span.name: span for span in exporter.get_finished_spans()}
    assert exported["invoke_agent ops"].attributes[sc.OTEL_SAFETY_TRACE_ESCALATION_LEVEL] == "NONE"
    assert engine.stats["parts_raised_to_run_level"] == 0
