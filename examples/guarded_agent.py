"""Inline tool-call guard: a pydantic-ai agent whose dangerous call is stopped before it runs.

The scripted model first lists a directory (allowed), then asks for `rm -rf ~` (blocked:
the tool never runs; the model gets the reasons as the tool's result). The verdicts are
written on the tool spans, so the trace, the store's audit log and `otel-safety status`
all show them.

Run: python examples/guarded_agent.py [store.duckdb] [principals.json]
Needs the demo extra (pydantic-ai): pip install 'otel-safety[demo]'
"""

from __future__ import annotations

import sys

from pydantic_ai import Agent
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import FunctionModel

import otel_safety
from otel_safety.guard import Guard
from otel_safety.integrations.pydantic_ai import guard_capability, instrumentation

STEPS = [
    ToolCallPart("run_shell", {"command": "ls -la"}),
    ToolCallPart("run_shell", {"command": "rm -rf ~"}),
    TextPart("I listed the files; the clean-up command was blocked, so nothing was deleted."),
]


def scripted(messages, info):
    """Stands in for a real model: plays STEPS, one per request."""
    turn = sum(isinstance(m, ModelResponse) for m in messages)
    return ModelResponse(parts=[STEPS[min(turn, len(STEPS) - 1)]])


def run_shell(command: str) -> str:
    """Pretend shell: this example never runs anything."""
    return f"(not run) {command}"


def main(db_path: str, principals: str | None) -> None:
    provider = otel_safety.configure(db_path, service_name="guarded-example", install=False)
    guard = Guard(principals)  # no file: only what the call does is judged
    agent = Agent(
        FunctionModel(scripted),
        name="ops-bot",
        tools=[run_shell],
        **instrumentation(provider, guard_capability(guard, "owner")),
    )
    result = agent.run_sync("Tidy up my home directory")
    provider.shutdown()  # flushes: every buffered trace is judged and stored
    print(result.output)
    print(f"stored in {db_path}; try: otel-safety status --db {db_path}")


if __name__ == "__main__":
    main(
        sys.argv[1] if len(sys.argv) > 1 else "otel-safety.duckdb",
        sys.argv[2] if len(sys.argv) > 2 else None,
    )
