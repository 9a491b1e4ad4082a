"""Benchmark: what reading GenAI log records costs the application's thread at `emit`.

A LoggerProvider with the SDK's BatchLogRecordProcessor (an exporter that drops everything)
is the anchor; the same provider with otel-safety's log record processor beside it is the
figure. Records are emitted inside a span, as instrumentations do: GenAI events (a
`gen_ai.client.inference.operation.details` record with ~2 KB of messages) and plain
application log records, which the processor only looks at the name of.

Run: python bench/bench_log_events.py --records 50000
Figures are printed, not asserted; they depend on the machine.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence

from opentelemetry._logs import LogRecord
from opentelemetry.sdk._logs import LoggerProvider, ReadableLogRecord
from opentelemetry.sdk._logs.export import (
    BatchLogRecordProcessor,
    LogRecordExporter,
    LogRecordExportResult,
)
from opentelemetry.sdk.trace import TracerProvider

from otel_safety import create_processor

MESSAGES = json.dumps(
    [{"role": "user", "parts": [{"type": "text", "content": "Summarize the README. " * 90}]}]
)


class _Dropping(LogRecordExporter):
    def export(self, batch: Sequence[ReadableLogRecord]) -> LogRecordExportResult:
        return LogRecordExportResult.SUCCESS

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True

    def shutdown(self) -> None:
        pass


def _run(records: int, genai: bool, with_safety: bool) -> float:
    """Microseconds per `emit` on the calling thread."""
    logger_provider = LoggerProvider(shutdown_on_exit=False)
    logger_provider.add_log_record_processor(BatchLogRecordProcessor(_Dropping()))
    tracer_provider = TracerProvider(shutdown_on_exit=False)
    if with_safety:  # judging on the engine's thread, so no other process shares the CPUs
        processor = create_processor(
            store=False, detection="thread", logger_provider=logger_provider
        )
        tracer_provider.add_span_processor(processor)
        processor.force_flush()  # detectors built before the clock starts
    logger = logger_provider.get_logger("bench")
    tracer = tracer_provider.get_tracer("bench")
    name = "gen_ai.client.inference.operation.details" if genai else "app.message"
    attributes = {"gen_ai.operation.name": "chat", "gen_ai.input.messages": MESSAGES}
    with tracer.start_as_current_span("chat", attributes={"gen_ai.operation.name": "chat"}):
        started = time.perf_counter()
        for _ in range(records):
            logger.emit(LogRecord(event_name=name, attributes=attributes))
        elapsed = time.perf_counter() - started
    tracer_provider.shutdown()
    logger_provider.shutdown()
    return elapsed / records * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=50_000)
    args = parser.parse_args()
    for genai in (True, False):
        kind = "GenAI events" if genai else "plain records"
        anchor = _run(args.records, genai, with_safety=False)
        safety = _run(args.records, genai, with_safety=True)
        print(
            f"{kind:13}  BatchLogRecordProcessor alone {anchor:6.2f} us/emit   "
            f"with otel-safety {safety:6.2f} us/emit   (+{safety - anchor:.2f} us)"
        )


if __name__ == "__main__":
    main()
