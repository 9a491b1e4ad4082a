"""An app on `otel_safety.configure()` with the openai-v2 instrumentation, run as a script.

The real `openai` client talks to the local fake server; the model asks for `run_shell`
with `rm -rf /`, the app runs a harmless stand-in and the model answers. The
instrumentation reads its settings from the environment the parent passes (content capture,
semconv opt-in), and so does otel-safety (`OTEL_SAFETY_DETECTION`). The script writes what
the app's LoggerProvider exported (our findings as `gen_ai.evaluation.result` log records,
and the instrumentation's own GenAI events) to a JSON file, so the parent can check both the
store and the logs.

    python logs_app.py DB OUT [--own-logs]

With `--own-logs` the app installs its own LoggerProvider before calling configure().
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

DANGEROUS = {"command": "rm -rf /"}
TOOL = {
    "type": "function",
    "function": {
        "name": "run_shell",
        "description": "Run a shell command.",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string"}},
            "required": ["command"],
        },
    },
}


def main(db: str, out: Path, own_logs: bool = False) -> None:
    import openai
    from fake_openai import FakeOpenAIServer, text_reply, tool_call_reply
    from opentelemetry import _logs
    from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import (
        InMemoryLogRecordExporter,
        SimpleLogRecordProcessor,
    )

    import otel_safety

    exported = InMemoryLogRecordExporter()
    if own_logs:  # the app set up logs before configure(), which must join them
        app_logs = LoggerProvider()
        app_logs.add_log_record_processor(SimpleLogRecordProcessor(exported))
        _logs.set_logger_provider(app_logs)
    provider = otel_safety.configure(db, service_name="logs-app")  # OTEL_SAFETY_DETECTION
    if own_logs:
        assert _logs.get_logger_provider() is app_logs
    else:
        _logs.get_logger_provider().add_log_record_processor(SimpleLogRecordProcessor(exported))
    OpenAIInstrumentor().instrument()  # the global providers configure() installed
    tracer = provider.get_tracer("tests.logs_app")
    replies = [tool_call_reply("run_shell", DANGEROUS, "call_1"), text_reply("Done.")]
    with FakeOpenAIServer(replies) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="test-key", max_retries=0)
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "Tidy up my machine."},
        ]
        with tracer.start_as_current_span("agent run"):
            first = client.chat.completions.create(model="fake", messages=messages, tools=[TOOL])
            call = first.choices[0].message.tool_calls[0]
            messages.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": call.id,
                            "type": "function",
                            "function": {
                                "name": call.function.name,
                                "arguments": call.function.arguments,
                            },
                        }
                    ],
                }
            )
            messages.append({"role": "tool", "tool_call_id": call.id, "content": "ok"})
            client.chat.completions.create(model="fake", messages=messages, tools=[TOOL])
    provider.shutdown()  # judges, writes the store, emits the findings, flushes the logs
    if own_logs:
        app_logs.force_flush()
    records = [
        {
            "event_name": item.log_record.event_name,
            "trace_id": f"{item.log_record.trace_id:032x}",
            "span_id": f"{item.log_record.span_id:016x}",
            "attributes": dict(item.log_record.attributes or {}),
        }
        for item in exported.get_finished_logs()
    ]
    out.write_text(json.dumps(records, default=str), encoding="utf-8")


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]), own_logs="--own-logs" in sys.argv[3:])
