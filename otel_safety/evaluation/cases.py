"""A labelled case (one conversation) and its rendering as GenAI-convention spans.

Datasets arrive as OpenAI-style messages; turning them into the spans an instrumented
agent would emit means the evaluation exercises mapping, assembly, detectors and the store
exactly as production traffic does.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_safety import semconv as sc


@dataclass
class Case:
    """One conversation with the labels its dataset gives it, per detector key."""

    case_id: str
    dataset: str
    messages: list[dict[str, Any]]
    labels: dict[str, bool]
    source: Literal["external", "synthetic"] = "external"
    system: str = ""
    note: str = ""
    meta: dict[str, Any] = field(default_factory=dict)


MODEL_SECONDS = 2.0
TOOL_SECONDS = 0.5


class SpanWriter:
    """Writes cases as the spans of an instrumented agent run, one trace per case.

    Spans get the durations of a real run (a model call takes seconds), not the microseconds
    it takes to write them, so time-based checks such as rapid-fire detection see a
    plausible pace.
    """

    def __init__(self) -> None:
        self._clock_ns = time.time_ns()
        self._exporter = InMemorySpanExporter()
        self._provider = TracerProvider()
        self._provider.add_span_processor(SimpleSpanProcessor(self._exporter))
        self._tracer = self._provider.get_tracer("otel_safety.evaluation")

    def spans(self, case: Case) -> list[ReadableSpan]:
        self._exporter.clear()
        self._clock_ns = time.time_ns()  # each run starts now, so traces never drift ahead
        root_attributes = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": case.dataset,
            sc.OTEL_SAFETY_EVAL_CASE_ID: case.case_id,
            sc.OTEL_SAFETY_EVAL_DATASET: case.dataset,
        }
        if not case.meta.get("tool_events_available", True):
            # Only the agent run is visible (no model or tool spans): what a trace looks like
            # when its tool events are unavailable, not absent.
            root_attributes.update(_agent_messages(case))
        with self._span(f"invoke_agent {case.dataset}", root_attributes, 0.0):
            if case.meta.get("tool_events_available", True):
                self._turns(case)
        return list(self._exporter.get_finished_spans())

    @contextlib.contextmanager
    def _span(self, name: str, attributes: dict[str, Any], seconds: float) -> Iterator[None]:
        """A span lasting `seconds` of simulated time (its children's time added)."""
        start = self._clock_ns
        with self._tracer.start_as_current_span(
            name, attributes=attributes, start_time=start, end_on_exit=False
        ) as span:
            yield
            self._clock_ns += int(seconds * 1e9)
            span.end(end_time=self._clock_ns)
        self._clock_ns += 1_000_000  # the next span starts a millisecond later

    def shutdown(self) -> None:
        self._provider.shutdown()

    def _turns(self, case: Case) -> None:
        history: list[dict[str, Any]] = []
        calls: dict[str, tuple[str, Any]] = {}
        system = [{"type": "text", "content": case.system}] if case.system else []
        answered = False
        for message in case.messages:
            role = message.get("role")
            if role == "assistant":
                self._chat(history, [_genai_message(message)], system)
                answered = True
                for call in message.get("tool_calls") or []:
                    function = call.get("function") or {}
                    calls[str(call.get("id"))] = (
                        str(function.get("name")),
                        function.get("arguments"),
                    )
            elif role == "tool":
                # Some exports leave ids empty: the span then has none either (not "None"),
                # and is paired with its call by name, as a producer without ids is.
                call_id = str(message.get("tool_call_id") or "") or None
                found = calls.get(call_id) if call_id else None
                name, arguments = found or _declared_call(message)
                self._tool(call_id, name, arguments, _text(message.get("content")))
            if role != "system":
                history.append(_genai_message(message))
        if not answered:  # input-only cases: the model call whose answer is not known
            self._chat(history, [], system)

    def _chat(
        self, history: list[dict[str, Any]], output: list[dict[str, Any]], system: list
    ) -> None:
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.input.messages": json.dumps(history),
        }
        if output:
            attributes["gen_ai.output.messages"] = json.dumps(output)
        if system:
            attributes["gen_ai.system_instructions"] = json.dumps(system)
        with self._span("chat", attributes, MODEL_SECONDS):
            pass

    def _tool(self, call_id: str | None, name: str, arguments: Any, result: str) -> None:
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "gen_ai.tool.call.result": result,
        }
        if call_id:
            attributes["gen_ai.tool.call.id"] = call_id
        if arguments is not None:
            attributes["gen_ai.tool.call.arguments"] = (
                arguments if isinstance(arguments, str) else json.dumps(arguments)
            )
        with self._span(f"execute_tool {name}", attributes, TOOL_SECONDS):
            pass


def _declared_call(message: dict[str, Any]) -> tuple[str, Any]:
    """The call a tool result answers when its id matches none (some exports leave ids
    empty and name the call on the result instead, as `tool_call: {function, args}`)."""
    declared = message.get("tool_call")
    if isinstance(declared, dict) and declared.get("function"):
        return str(declared["function"]), declared.get("args")
    return str(message.get("name") or "tool"), None


def _agent_messages(case: Case) -> dict[str, str]:
    users = [_genai_message(m) for m in case.messages if m.get("role") == "user"]
    answers = [m for m in case.messages if m.get("role") == "assistant" and m.get("content")]
    attributes = {"gen_ai.input.messages": json.dumps(users)}
    if case.system:
        attributes["gen_ai.system_instructions"] = json.dumps(
            [{"type": "text", "content": case.system}]
        )
    if answers:
        attributes["gen_ai.output.messages"] = json.dumps([_genai_message(answers[-1])])
    return attributes


def _genai_message(message: dict[str, Any]) -> dict[str, Any]:
    """OpenAI-style chat message -> GenAI `{role, parts}`."""
    role = str(message.get("role") or "user")
    if role == "tool":
        part = {
            "type": "tool_call_response",
            "id": message.get("tool_call_id"),
            "response": _text(message.get("content")),
        }
        return {"role": "tool", "parts": [part]}
    parts: list[dict[str, Any]] = []
    content = _text(message.get("content"))
    if content:
        parts.append({"type": "text", "content": content})
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        parts.append(
            {
                "type": "tool_call",
                "id": call.get("id"),
                "name": function.get("name"),
                "arguments": function.get("arguments"),
            }
        )
    return {"role": role, "parts": parts}


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts
        return "\n".join(
            str(p.get("text", p.get("content", ""))) if isinstance(p, dict) else str(p)
            for p in content
        )
    return json.dumps(content, default=str)
