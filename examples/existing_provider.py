"""Already have a TracerProvider? Add the processor, and give it your exporters.

The processor replaces the BatchSpanProcessor you would use for those exporters: it sends
them annotated copies, so adding both would export every span twice.

Run: python examples/existing_provider.py [store.duckdb]
"""

from __future__ import annotations

import json
import sys

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter

from otel_safety import create_processor


def main(db_path: str) -> None:
    provider = TracerProvider()
    provider.add_span_processor(create_processor(db_path, exporters=[ConsoleSpanExporter()]))
    tracer = provider.get_tracer("my-agent")
    # Any GenAI instrumentation works; here the spans are written by hand for brevity.
    with tracer.start_as_current_span(
        "invoke_agent ops-bot",
        attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "ops-bot"},
    ):
        with tracer.start_as_current_span(
            "chat",
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.input.messages": json.dumps(
                    [{"role": "user", "parts": [{"type": "text", "content": "List the users"}]}]
                ),
            },
        ):
            pass
        with tracer.start_as_current_span(
            "execute_tool run_sql",
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "run_sql",
                "gen_ai.tool.call.arguments": json.dumps({"query": "DROP TABLE users"}),
            },
        ):
            pass
    provider.shutdown()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "otel-safety.duckdb")
