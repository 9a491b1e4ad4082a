"""Drop-in setup: two lines give a TracerProvider that judges, annotates and stores spans.

Run: python examples/drop_in.py [store.duckdb]
Needs the demo extra (pydantic-ai): pip install 'otel-safety[demo]'
"""

from __future__ import annotations

import sys

from pydantic_ai import Agent
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import FunctionModel

import otel_safety
from otel_safety.integrations.pydantic_ai import instrumentation


def scripted(messages, info):
    """Stands in for a real model: first asks to delete a directory, then answers."""
    if len(messages) == 1:
        return ModelResponse(parts=[ToolCallPart("run_shell", {"command": "rm -rf build"})])
    return ModelResponse(parts=[TextPart("Here is the summary of the README.")])


def run_shell(command: str) -> str:
    """Pretend shell: this example never runs anything."""
    return f"(not run) {command}"


def main(db_path: str) -> None:
    provider = otel_safety.configure(db_path, service_name="drop-in-example")  # line 1
    agent = Agent(
        FunctionModel(scripted), name="readme-bot", tools=[run_shell], **instrumentation(provider)
    )  # line 2: your agent, instrumented as usual
    agent.run_sync("Summarize the README")
    provider.shutdown()  # flushes: every buffered trace is judged and stored
    print(f"stored in {db_path}; try: otel-safety query flagged_spans --db {db_path}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "otel-safety.duckdb")
