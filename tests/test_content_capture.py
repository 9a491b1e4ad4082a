"""Content capture off, with each real instrumentation: the model spans are named, not judged.

The same scripted agent run (`instrumented.py`) under each instrumentation with its content
capture off must leave a `no content captured` note on every model call; with it on (the
settings the README gives), none.
"""

from __future__ import annotations

import json

import pytest
from instrumented import (
    FINAL_ANSWER,
    NO_CONTENT,
    SYSTEM_PROMPT,
    TOOL_ARGUMENTS,
    TOOL_NAME,
    USER_REQUEST,
    run_openai_agent,
    run_pydantic_ai_agent,
    run_shell,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_safety import semconv as sc
from otel_safety.content_capture import NO_CONTENT_NOTE, unjudged_spans_note
from otel_safety.pipeline import Pipeline


def _without_content(spans: list[ReadableSpan]) -> list[str]:
    """Names of the spans the pipeline noted as carrying no content."""
    evaluation = Pipeline(detectors=[]).evaluate(spans)
    assert len(evaluation.without_content) == sum(
        NO_CONTENT_NOTE in (s.attributes or {}).get(sc.OTEL_SAFETY_NOTES, ())
        for s in evaluation.spans
    )
    # The root says so too: a reader of the root alone (a tail sampler) would see a clean run.
    (root,) = [s for s in evaluation.spans if s.parent is None]
    said = (root.attributes or {}).get(sc.OTEL_SAFETY_NOTES, ())
    unjudged = unjudged_spans_note(len(evaluation.without_content))
    assert (unjudged in said) == bool(evaluation.without_content), said
    return sorted(
        s.name
        for s in evaluation.spans
        if NO_CONTENT_NOTE in (s.attributes or {}).get(sc.OTEL_SAFETY_NOTES, ())
    )


@pytest.mark.process
@pytest.mark.parametrize(
    ("instrumentation", "chat_span"),
    [
        ("otel_genai", "chat fake-model"),
        ("openinference", "ChatCompletion"),
        ("openllmetry", "openai.chat"),
    ],
)
def test_openai_instrumentations_without_content_are_named(instrumentation, chat_span):
    assert _without_content(run_openai_agent(instrumentation + NO_CONTENT)) == [chat_span] * 2
    assert _without_content(run_openai_agent(instrumentation)) == []


def _pydantic_ai_run(include_content: bool) -> list[ReadableSpan]:
    from pydantic_ai import Agent
    from pydantic_ai.capabilities import Instrumentation
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel
    from pydantic_ai.models.instrumented import InstrumentationSettings

    def play(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if not any(isinstance(m, ModelResponse) for m in messages):
            return ModelResponse(parts=[ToolCallPart(TOOL_NAME, dict(TOOL_ARGUMENTS), "c1")])
        return ModelResponse(parts=[TextPart(FINAL_ANSWER)])

    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "pydantic-ai"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    settings = InstrumentationSettings(tracer_provider=provider, include_content=include_content)
    agent = Agent(
        FunctionModel(play),
        instructions=SYSTEM_PROMPT,
        tools=[run_shell],
        capabilities=[Instrumentation(settings)],
    )
    agent.run_sync(USER_REQUEST)
    provider.shutdown()
    return list(exporter.get_finished_spans())


def test_pydantic_ai_without_content_is_named():
    named = _without_content(_pydantic_ai_run(include_content=False))
    # Its message attributes stay, with the parts' types only: both model calls and the tool
    assert named == ["chat function:play:", "chat function:play:", f"execute_tool {TOOL_NAME}"]
    assert _without_content(run_pydantic_ai_agent()) == []


def test_a_tool_call_without_content_gets_no_guard_decision_in_the_audit_log():
    """Not judged, so not ALLOWed: an audit row for it would read as a call found safe."""
    from datetime import UTC, datetime

    from otel_safety.exporters.duckdb import audit_rows

    now = datetime.now(UTC)
    blind = Pipeline().evaluate(_pydantic_ai_run(include_content=False))
    tool_spans = [s.name for s in blind.spans if s.name.startswith("execute_tool")]
    assert tool_spans and not [row for row in audit_rows(blind, now) if row["source"] == "trace"]
    seen = Pipeline().evaluate(_pydantic_ai_run(include_content=True))
    assert [row["tool"] for row in audit_rows(seen, now) if row["source"] == "trace"] == [TOOL_NAME]


def test_a_model_call_that_failed_is_not_taken_for_capture_turned_off():
    """A model request that failed (the server answered 500) left its chat span without
    messages, and `status` told the user to turn content capture on, which it was."""
    from pydantic_ai import Agent
    from pydantic_ai.capabilities import Instrumentation
    from pydantic_ai.models.function import FunctionModel
    from pydantic_ai.models.instrumented import InstrumentationSettings

    def fail(messages, info):
        raise RuntimeError("the model server answered 500")

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    settings = InstrumentationSettings(tracer_provider=provider, include_content=True)
    agent = Agent(FunctionModel(fail), capabilities=[Instrumentation(settings)])
    with pytest.raises(RuntimeError):
        agent.run_sync(USER_REQUEST)
    provider.shutdown()
    spans = list(exporter.get_finished_spans())
    assert any(s.name.startswith("chat") for s in spans)
    assert _without_content(spans) == []


def test_content_that_came_but_could_not_be_read_is_not_taken_for_capture_turned_off():
    """Malformed messages got their reading problem noted and, beside it, the advice to
    turn content capture on, which was on."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("app")
    with (
        tracer.start_as_current_span("agent run"),
        tracer.start_as_current_span(
            "chat broken",
            attributes={"gen_ai.operation.name": "chat", "gen_ai.input.messages": "[{not json"},
        ),
    ):
        pass
    provider.shutdown()
    spans = list(exporter.get_finished_spans())
    evaluation = Pipeline(detectors=[]).evaluate(spans)
    [chat] = [s for s in evaluation.spans if s.name == "chat broken"]
    notes = chat.attributes[sc.OTEL_SAFETY_NOTES]
    assert any("malformed JSON" in note for note in notes)
    assert NO_CONTENT_NOTE not in notes and evaluation.without_content == []


def test_a_tool_span_without_arguments_judged_by_the_call_the_model_asked_for_is_audited():
    """A tool span that recorded only the tool's name and result is judged with the arguments
    of the model's answer that asked for it: its BLOCK reaches the audit log, and no note
    says it was not judged."""
    from datetime import UTC, datetime

    from otel_safety.exporters.duckdb import audit_rows

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("app")
    asked = [
        {
            "role": "assistant",
            "parts": [
                {
                    "type": "tool_call",
                    "id": "call_1",
                    "name": "run_shell",
                    "arguments": {"command": "rm -rf /var/log/*"},
                }
            ],
        }
    ]
    with tracer.start_as_current_span(
        "invoke_agent ops", attributes={"gen_ai.operation.name": "invoke_agent"}
    ):
        with tracer.start_as_current_span(
            "chat gpt-4o",
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.input.messages": json.dumps(
                    [{"role": "user", "parts": [{"type": "text", "content": "tidy the logs"}]}]
                ),
                "gen_ai.output.messages": json.dumps(asked),
            },
        ):
            pass
        with tracer.start_as_current_span(
            "execute_tool run_shell",
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "run_shell",
                "gen_ai.tool.call.id": "call_1",
                "gen_ai.tool.call.result": "removed",
            },
        ):
            pass
    provider.shutdown()
    evaluation = Pipeline().evaluate(list(exporter.get_finished_spans()))
    assert evaluation.without_content == []
    [row] = [r for r in audit_rows(evaluation, datetime.now(UTC)) if r["source"] == "trace"]
    assert (row["tool"], row["verdict"]) == ("run_shell", "BLOCK")
