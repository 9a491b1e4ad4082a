"""Whole agent runs replayed through real OpenAI-client instrumentation, one trace per run.

A run is a list of chat messages (system, user, assistant with or without tool calls, tool
results), as in `otel_safety/evaluation/agent_runs/`. A local fake server answers each model
call with the run's next assistant message, and a hand-written loop sends the messages an
agent would send (the history so far, the tools it has); the instrumentation under test
writes the spans. Each instrumentation runs in a fresh interpreter (this file as a script),
as in `instrumented.py`, and the spans come back as OTLP/JSON read by the `ingest` codec.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from instrumented import _SETTING_PREFIXES, OPENAI_INSTRUMENTATIONS, _instrumentor, _provider
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_safety.logs import LogEvent, event_name, genai_event
from otel_safety.otlp import request_from_json, request_to_json, spans_from_request

RUN_ID = "app.run.id"  # on each run's root span, to find its trace again


EVENTS = "otel_genai:events"  # openai-v2 with content in log records only (EVENT_ONLY)
STREAM = ":stream"  # after an instrumentation's name: every model call streams its answer


def replay(instrumentation: str, runs: list[dict[str, Any]]) -> dict[str, list[ReadableSpan]]:
    """Each run's spans under `instrumentation`, keyed by the run's id."""
    return {
        run_id: spans for run_id, (spans, _) in replay_with_events(instrumentation, runs).items()
    }


def replay_with_events(
    instrumentation: str, runs: list[dict[str, Any]]
) -> dict[str, tuple[list[ReadableSpan], list[LogEvent]]]:
    """Each run's spans and GenAI log events under `instrumentation` (or `EVENTS`)."""
    base = instrumentation.removesuffix(STREAM)
    if base not in OPENAI_INSTRUMENTATIONS and base != EVENTS:
        raise ValueError(f"unknown instrumentation {instrumentation!r}")
    with tempfile.TemporaryDirectory(prefix="otel-safety-replay-") as tmp:
        given, out = Path(tmp) / "runs.json", Path(tmp) / "spans.json"
        given.write_text(json.dumps(runs), encoding="utf-8")
        env = {k: v for k, v in os.environ.items() if not k.startswith(_SETTING_PREFIXES)}
        done = subprocess.run(
            [sys.executable, str(Path(__file__).resolve()), instrumentation, str(given), str(out)],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"{instrumentation} replay failed:\n{done.stderr[-4000:]}")
        document = json.loads(out.read_text(encoding="utf-8"))
    problems: list[str] = []
    spans = spans_from_request(request_from_json(document["spans"]), problems)
    events = [LogEvent(**event) for event in document["events"]]
    if problems:
        raise RuntimeError(f"{instrumentation} spans did not decode cleanly: {problems[:5]}")
    roots = {s.context.trace_id: str(s.attributes[RUN_ID]) for s in spans if RUN_ID in s.attributes}
    traces: dict[str, tuple[list[ReadableSpan], list[LogEvent]]] = {}
    for span in spans:
        traces.setdefault(roots[span.context.trace_id], ([], []))[0].append(span)
    for event in events:
        traces[roots[event.trace_id]][1].append(event)
    return traces


def _tools(run: dict[str, Any]) -> list[dict[str, Any]]:
    """A schema for every tool the run calls: any object of arguments."""
    names = {
        call["function"]["name"]
        for message in run["messages"]
        for call in message.get("tool_calls") or []
    }
    return [
        {
            "type": "function",
            "function": {"name": name, "parameters": {"type": "object", "properties": {}}},
        }
        for name in sorted(names)
    ]


def _assistant(message: dict[str, Any]) -> dict[str, Any]:
    """The run's assistant message as the server sends it (and as the loop sends it back)."""
    reply: dict[str, Any] = {"role": "assistant", "content": message.get("content")}
    if message.get("tool_calls"):
        reply["tool_calls"] = [
            {
                "id": call["id"],
                "type": "function",
                "function": {
                    "name": call["function"]["name"],
                    "arguments": _json_text(call["function"].get("arguments")),
                },
            }
            for call in message["tool_calls"]
        ]
    return reply


def _json_text(value: Any) -> str:
    """Arguments as the API carries them: JSON text (some exports keep the object)."""
    return value if isinstance(value, str) else json.dumps(value if value is not None else {})


def _child(instrumentation: str, given: Path, out: Path) -> None:
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import InMemoryLogExporter, SimpleLogRecordProcessor

    stream = instrumentation.endswith(STREAM)
    instrumentation = instrumentation.removesuffix(STREAM)
    if instrumentation == EVENTS:
        instrumentation = "otel_genai"
        os.environ.update(OPENAI_INSTRUMENTATIONS[instrumentation])
        os.environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "EVENT_ONLY"
    else:
        os.environ.update(OPENAI_INSTRUMENTATIONS[instrumentation])  # before any import
    from fake_openai import FakeOpenAIServer

    _pace_like_a_model()
    runs = json.loads(given.read_text(encoding="utf-8"))
    replies = [_assistant(m) for run in runs for m in run["messages"] if m["role"] == "assistant"]
    exporter = InMemorySpanExporter()
    provider = _provider(f"replay-{instrumentation}", exporter)
    logs = InMemoryLogExporter()
    logger_provider = LoggerProvider()
    logger_provider.add_log_record_processor(SimpleLogRecordProcessor(logs))
    instrumentor = _instrumentor(instrumentation)
    instrumentor.instrument(tracer_provider=provider, logger_provider=logger_provider)
    try:
        import openai

        with FakeOpenAIServer(replies) as server:
            client = openai.OpenAI(base_url=server.base_url, api_key="test-key", max_retries=0)
            tracer = provider.get_tracer("tests.replay")
            for run in runs:
                with tracer.start_as_current_span("agent run", attributes={RUN_ID: run["id"]}):
                    _play(client, run, stream)
    finally:
        instrumentor.uninstrument()
    provider.force_flush()
    spans = exporter.get_finished_spans()
    provider.shutdown()
    events = [
        vars(event)
        for data in logs.get_finished_logs()
        if (record := data.log_record)
        and (
            event := genai_event(
                event_name(record.event_name, record.attributes),
                record.trace_id,
                record.span_id,
                record.timestamp or record.observed_timestamp,
                dict(record.attributes or {}),
                record.body,
            )
        )
    ]
    document = {"spans": request_to_json(spans), "events": events}
    out.write_text(json.dumps(document, default=str), encoding="utf-8")


STEP_NS = 1_250_000_000  # simulated time between two timestamps the SDK takes


def _pace_like_a_model() -> None:
    """Spans timed as a real run is: the replay answers in microseconds, a model in seconds
    (about as `SpanWriter` paces its runs), and the guard's rate rules read the spans'
    times."""
    import opentelemetry.sdk.trace as sdk_trace

    clock = [sdk_trace.time_ns()]

    def simulated() -> int:
        clock[0] += STEP_NS
        return clock[0]

    sdk_trace.time_ns = simulated


def _play(client: Any, run: dict[str, Any], stream: bool = False) -> None:
    """Send what the agent would have sent before each of its messages; the server answers
    with that message (streamed in chunks with `stream`, read to the end)."""
    tools = _tools(run)
    sent: list[dict[str, Any]] = []
    for message in run["messages"]:
        if message["role"] == "assistant":
            extra: dict[str, Any] = {"tools": tools} if tools else {}
            if stream:
                extra["stream"] = True
            answer = client.chat.completions.create(model="fake-model", messages=sent, **extra)
            if stream:
                for _ in answer:
                    pass
            sent.append(_assistant(message))
        elif message["role"] == "tool":
            content = message.get("content")
            text = content if isinstance(content, str) else json.dumps(content)
            sent.append({"role": "tool", "tool_call_id": message["tool_call_id"], "content": text})
        else:
            sent.append({"role": message["role"], "content": message.get("content") or ""})


if __name__ == "__main__":
    _child(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]))


def replay_pydantic_ai(runs: list[dict[str, Any]]) -> dict[str, list[ReadableSpan]]:
    """Each run as a pydantic-ai `Agent` whose scripted model says the run's assistant
    messages and whose tools answer with the run's results, in this process. Only runs
    pydantic-ai can say: one user message (besides a system prompt), ending on an answer
    without tool calls."""
    from pydantic_ai import Agent, RunContext, Tool
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from otel_safety.integrations.pydantic_ai import instrumentation

    exporter = InMemorySpanExporter()
    provider = _provider("replay-pydantic-ai", exporter)
    traces: dict[str, list[ReadableSpan]] = {}
    try:
        for run in runs:
            if not sayable_by_pydantic_ai(run):
                raise ValueError(f"run {run['id']} is not one pydantic-ai can replay")
            said = iter([m for m in run["messages"] if m["role"] == "assistant"])
            results = {
                m["tool_call_id"]: m.get("content") for m in run["messages"] if m["role"] == "tool"
            }

            def play(messages: list[Any], info: AgentInfo, said: Any = said) -> ModelResponse:
                message = next(said)
                parts: list[Any] = [TextPart(message["content"])] if message.get("content") else []
                for call in message.get("tool_calls") or []:
                    arguments = call["function"].get("arguments")
                    if isinstance(arguments, str):
                        arguments = json.loads(arguments or "{}")
                    parts.append(
                        ToolCallPart(call["function"]["name"], arguments, tool_call_id=call["id"])
                    )
                return ModelResponse(parts=parts)

            def answer(ctx: RunContext[None], results: dict = results, **_: Any) -> Any:
                return results.get(ctx.tool_call_id, "")

            tools = [
                Tool.from_schema(
                    answer,
                    name=schema["function"]["name"],
                    description=None,
                    json_schema={"type": "object", "additionalProperties": True},
                    takes_ctx=True,
                )
                for schema in _tools(run)
            ]
            system = "\n".join(m["content"] for m in run["messages"] if m["role"] == "system")
            agent = Agent(
                FunctionModel(play),
                instructions=system or None,
                tools=tools,
                **instrumentation(provider),
            )
            exporter.clear()
            prompt = next(m["content"] for m in run["messages"] if m["role"] == "user")
            agent.run_sync(prompt)
            provider.force_flush()
            traces[run["id"]] = list(exporter.get_finished_spans())
    finally:
        provider.shutdown()
    return traces


def sayable_by_pydantic_ai(run: dict[str, Any]) -> bool:
    """One user message (after a system prompt, if any), first; an answer without tool
    calls, last; every tool call with an id of its own (pydantic-ai requires one)."""
    roles = [m["role"] for m in run["messages"]]
    last = run["messages"][-1]
    ids = [c.get("id") for m in run["messages"] for c in m.get("tool_calls") or []]
    return (
        all(ids)
        and len(set(ids)) == len(ids)
        and roles.count("user") == 1
        and roles[: roles.index("user")] in ([], ["system"])
        and last["role"] == "assistant"
        and bool(last.get("content"))
        and not last.get("tool_calls")
        and set(roles) <= {"system", "user", "assistant", "tool"}
    )


def client_spans(messages: list[dict[str, Any]]) -> list[ReadableSpan]:
    """What a client instrumentation writes for a run, built by hand: one GenAI `chat` span
    per assistant message, the history before it as input and the message as output; no
    span per tool call (its result is seen only in the next span's history)."""
    from otel_safety.evaluation.cases import _genai_message

    exporter = InMemorySpanExporter()
    provider = _provider("client-spans", exporter)
    tracer = provider.get_tracer("tests.client_spans")
    with tracer.start_as_current_span("agent run"):
        for number, message in enumerate(messages):
            if message["role"] != "assistant":
                continue
            attributes = {
                "gen_ai.operation.name": "chat",
                "gen_ai.input.messages": json.dumps([_genai_message(m) for m in messages[:number]]),
                "gen_ai.output.messages": json.dumps([_genai_message(message)]),
            }
            with tracer.start_as_current_span("chat", attributes=attributes):
                pass
    spans = list(exporter.get_finished_spans())
    provider.shutdown()
    return spans
