"""How `eval` writes a labelled run as spans: one trace, a span per model call and tool call."""

from __future__ import annotations

import pytest

from otel_safety.evaluation.cases import Case, SpanWriter
from otel_safety.pipeline import Pipeline

pytestmark = pytest.mark.unit


def test_a_run_whose_export_left_call_ids_empty_counts_each_call_once() -> None:
    """Some exports leave ids empty (AgentDojo's command-r runs) and name the call on its
    result: the tool span then carries no id, not the text "None", and is paired with the
    call the model asked for by name, so no call is counted twice."""
    call = {"id": "", "type": "function", "function": {"name": "create_file", "arguments": "{}"}}
    messages = [
        {"role": "user", "content": "Make a grocery list file."},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": None, "content": "created", "name": "create_file"},
        {"role": "assistant", "content": "Done."},
    ]
    writer = SpanWriter()
    spans = writer.spans(Case("ids", "probe", messages, {}))
    writer.shutdown()
    tool_spans = [s for s in spans if s.attributes.get("gen_ai.operation.name") == "execute_tool"]
    assert [dict(s.attributes).get("gen_ai.tool.call.id") for s in tool_spans] == [None]
    calls = Pipeline(detectors=["deception"]).evaluate(spans).trajectory.tool_calls
    assert [(c.name, c.result, c.source) for c in calls] == [
        ("create_file", "created", "tool_span")
    ]
