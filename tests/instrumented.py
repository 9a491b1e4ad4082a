"""Spans from real third-party instrumentation around one small, scripted agent run.

Every helper here drives the same run: a repository assistant is asked to summarise the
README, asks for the tool `run_shell` with `{"command": "rm -rf build"}`, gets "removed build/"
back and answers "The README describes a web app.". Only the instrumentation differs.

The `openai` instrumentors patch the client module globally and some of them read their
settings from the environment when imported, so each one runs in a fresh interpreter (this
file executed as a script). The child writes its spans as OTLP/JSON and the parent reads them
back with the same codec the `ingest` command uses.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Tracer

from otel_safety.otlp import request_from_json, request_to_json, spans_from_request

SYSTEM_PROMPT = "You are a repository assistant."
USER_REQUEST = "Summarize the README"
TOOL_NAME = "run_shell"
TOOL_ARGUMENTS: dict[str, Any] = {"command": "rm -rf build"}
TOOL_CALL_ID = "call_1"
TOOL_RESULT = "removed build/"
FINAL_ANSWER = "The README describes a web app."
ROOT_SPAN_NAME = "agent run"
TOOL_SPAN_NAME = "local tool"  # a plain span around the tool function, no GenAI attributes
MODEL = "fake-model"

# Instrumentation name -> the environment it needs before it is imported.
DOUBLE = "pydantic_ai+otel_genai"  # two instrumentations on every model call
OPENAI_INSTRUMENTATIONS: dict[str, dict[str, str]] = {
    "otel_genai": {
        "OTEL_SEMCONV_STABILITY_OPT_IN": "gen_ai_latest_experimental",
        "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "SPAN_ONLY",
    },
    "openinference": {
        "OPENINFERENCE_HIDE_INPUTS": "false",
        "OPENINFERENCE_HIDE_OUTPUTS": "false",
        "OPENINFERENCE_HIDE_INPUT_MESSAGES": "false",
        "OPENINFERENCE_HIDE_OUTPUT_MESSAGES": "false",
        "OPENINFERENCE_HIDE_INPUT_TEXT": "false",
        "OPENINFERENCE_HIDE_OUTPUT_TEXT": "false",
    },
    "openllmetry": {"TRACELOOP_TRACE_CONTENT": "true"},
}

# The same instrumentations with content capture off, as `<name>:no_content`.
CONTENT_OFF: dict[str, dict[str, str]] = {
    "otel_genai": {"OTEL_SEMCONV_STABILITY_OPT_IN": "gen_ai_latest_experimental"},
    "openinference": {
        "OPENINFERENCE_HIDE_INPUTS": "true",
        "OPENINFERENCE_HIDE_OUTPUTS": "true",
        "OPENINFERENCE_HIDE_INPUT_MESSAGES": "true",
        "OPENINFERENCE_HIDE_OUTPUT_MESSAGES": "true",
    },
    "openllmetry": {"TRACELOOP_TRACE_CONTENT": "false"},
}
NO_CONTENT = ":no_content"
# OpenInference with its flattened messages hidden: each request is read from the request
# body it writes as `input.value`, each answer from the response body in `output.value`.
REQUEST_BODY = ":request_body"
# The same run with no span around it, as a bare chat-client app makes it: each model call
# is then a trace of its own, and the next one receives the earlier call as history.
BARE = ":bare"

_SETTING_PREFIXES = ("OTEL_", "OPENINFERENCE_", "TRACELOOP_")
_TOOL_SCHEMA = {
    "type": "function",
    "function": {
        "name": TOOL_NAME,
        "description": "Run a shell command in the repository.",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string"}},
            "required": ["command"],
        },
    },
}


def run_shell(command: str) -> str:
    """Stand-in for a shell tool: reports success and never executes or deletes anything."""
    return TOOL_RESULT


def run_openai_agent(instrumentation: str) -> list[ReadableSpan]:
    """Run the agent on the `openai` client under one instrumentation; return its spans.

    `instrumentation` is "otel_genai" (opentelemetry-instrumentation-openai-v2),
    "openinference" (openinference-instrumentation-openai) or "openllmetry"
    (opentelemetry-instrumentation-openai from Traceloop); or DOUBLE: a pydantic-ai agent on
    an OpenAI model whose client openai-v2 also instruments, so every model call has two
    chat spans, one from each instrumentation. `<name>:no_content` runs it with content
    capture off (`CONTENT_OFF`).
    """
    base = instrumentation.removesuffix(NO_CONTENT).removesuffix(BARE).removesuffix(REQUEST_BODY)
    if base not in OPENAI_INSTRUMENTATIONS and instrumentation != DOUBLE:
        raise ValueError(f"unknown instrumentation {instrumentation!r}")
    with tempfile.TemporaryDirectory(prefix="otel-safety-instrumented-") as tmp:
        out = Path(tmp) / "spans.json"
        # The child gets only the settings it asks for, whatever the calling shell exported.
        env = {k: v for k, v in os.environ.items() if not k.startswith(_SETTING_PREFIXES)}
        done = subprocess.run(
            [sys.executable, str(Path(__file__).resolve()), instrumentation, str(out)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"{instrumentation} run failed (exit {done.returncode}):\n{done.stderr}"
            )
        document = json.loads(out.read_text(encoding="utf-8"))
    problems: list[str] = []
    spans = spans_from_request(request_from_json(document), problems)
    if problems:
        raise RuntimeError(f"{instrumentation} spans did not decode cleanly: {problems}")
    return spans


def run_pydantic_ai_agent() -> list[ReadableSpan]:
    """Run the agent as a pydantic-ai `Agent` with a scripted model, in this process."""
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from otel_safety.integrations.pydantic_ai import instrumentation

    def play(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if not any(isinstance(m, ModelResponse) for m in messages):
            call = ToolCallPart(TOOL_NAME, dict(TOOL_ARGUMENTS), tool_call_id=TOOL_CALL_ID)
            return ModelResponse(parts=[call])
        return ModelResponse(parts=[TextPart(FINAL_ANSWER)])

    exporter = InMemorySpanExporter()
    provider = _provider("pydantic-ai", exporter)
    try:
        agent = Agent(
            FunctionModel(play),
            instructions=SYSTEM_PROMPT,
            tools=[run_shell],
            **instrumentation(provider),
        )
        result = agent.run_sync(USER_REQUEST)
        if result.output != FINAL_ANSWER:
            raise RuntimeError(f"unexpected agent output {result.output!r}")
        provider.force_flush()
        return list(exporter.get_finished_spans())
    finally:
        provider.shutdown()


def _provider(service: str, exporter: InMemorySpanExporter) -> TracerProvider:
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider


def _agent_loop(client: Any, tracer: Tracer, root: bool = True) -> str:
    """A minimal hand-written tool loop on the chat completions API (in a span of its own
    unless not `root`)."""
    tools: dict[str, Callable[..., str]] = {TOOL_NAME: run_shell}
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": USER_REQUEST},
    ]
    with tracer.start_as_current_span(ROOT_SPAN_NAME) if root else contextlib.nullcontext():
        for _ in range(4):
            response = client.chat.completions.create(
                model=MODEL, messages=messages, tools=[_TOOL_SCHEMA]
            )
            message = response.choices[0].message
            if not message.tool_calls:
                return message.content or ""
            messages.append(
                {
                    "role": "assistant",
                    "content": message.content,
                    "tool_calls": [
                        {
                            "id": call.id,
                            "type": "function",
                            "function": {
                                "name": call.function.name,
                                "arguments": call.function.arguments,
                            },
                        }
                        for call in message.tool_calls
                    ],
                }
            )
            for call in message.tool_calls:
                with tracer.start_as_current_span(
                    TOOL_SPAN_NAME, attributes={"app.tool": call.function.name}
                ):
                    result = tools[call.function.name](**json.loads(call.function.arguments))
                messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    raise RuntimeError("the agent loop did not finish")


def _instrumentor(instrumentation: str) -> Any:
    if instrumentation == "otel_genai":
        from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor
    elif instrumentation == "openinference":
        from openinference.instrumentation.openai import OpenAIInstrumentor
    else:
        from opentelemetry.instrumentation.openai import OpenAIInstrumentor
    return OpenAIInstrumentor()


def _child(instrumentation: str, out: Path) -> None:
    """Body of the subprocess: instrument, run the loop, write OTLP/JSON to `out`."""
    double = instrumentation == DOUBLE
    bare = instrumentation.endswith(BARE)
    base = instrumentation.removesuffix(NO_CONTENT).removesuffix(BARE).removesuffix(REQUEST_BODY)
    settings = OPENAI_INSTRUMENTATIONS["otel_genai" if double else base]
    if instrumentation.endswith(NO_CONTENT):
        settings = CONTENT_OFF[base]
    if instrumentation.endswith(REQUEST_BODY):
        settings = {
            **settings,
            "OPENINFERENCE_HIDE_INPUT_MESSAGES": "true",
            "OPENINFERENCE_HIDE_OUTPUT_MESSAGES": "true",
        }
    os.environ.update(settings)  # before any import reads it
    from fake_openai import FakeOpenAIServer, text_reply, tool_call_reply

    exporter = InMemorySpanExporter()
    provider = _provider(f"openai-{instrumentation}", exporter)
    instrumentor = _instrumentor("otel_genai" if double else base)
    instrumentor.instrument(tracer_provider=provider)
    try:
        import openai

        replies = [
            tool_call_reply(TOOL_NAME, TOOL_ARGUMENTS, TOOL_CALL_ID),
            text_reply(FINAL_ANSWER),
        ]
        with FakeOpenAIServer(replies) as server:
            client = openai.OpenAI(base_url=server.base_url, api_key="test-key", max_retries=0)
            if double:  # pydantic-ai's OpenAI model takes the async client
                aclient = openai.AsyncOpenAI(
                    base_url=server.base_url, api_key="test-key", max_retries=0
                )
                answer = _pydantic_ai_on(aclient, provider)
            else:
                tracer = provider.get_tracer("tests.instrumented")
                answer = _agent_loop(client, tracer, root=not bare)
        if answer != FINAL_ANSWER:
            raise RuntimeError(f"unexpected agent output {answer!r}")
    finally:
        instrumentor.uninstrument()
    provider.force_flush()
    spans = exporter.get_finished_spans()
    provider.shutdown()
    out.write_text(json.dumps(request_to_json(spans)), encoding="utf-8")


def _pydantic_ai_on(client: Any, provider: TracerProvider) -> str:
    """The agent as a pydantic-ai `Agent` on an OpenAI model that uses `client`."""
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    from otel_safety.integrations.pydantic_ai import instrumentation

    model = OpenAIChatModel(MODEL, provider=OpenAIProvider(openai_client=client))
    agent = Agent(model, instructions=SYSTEM_PROMPT, tools=[run_shell], **instrumentation(provider))
    return agent.run_sync(USER_REQUEST).output


if __name__ == "__main__":
    _child(sys.argv[1], Path(sys.argv[2]))
