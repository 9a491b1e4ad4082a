"""`SafetyLogRecordProcessor`: GenAI events sent as log records, into the same engine.

Added to a `LoggerProvider` beside its exporting processors: it exports nothing itself, it
only hands the GenAI events (messages, choices, operation details) to the engine, which
holds them with their trace and reads them as part of their span.
"""

from __future__ import annotations

import contextlib

from opentelemetry.sdk._logs import LogRecordProcessor, ReadWriteLogRecord

from otel_safety.engine import SafetyEngine
from otel_safety.logs import event_name, genai_event


class SafetyLogRecordProcessor(LogRecordProcessor):
    """Reads log records on the application's thread: a name check and an enqueue."""

    def __init__(self, engine: SafetyEngine) -> None:
        self.engine = engine

    def on_emit(self, log_record: ReadWriteLogRecord) -> None:
        # The application's thread: never block, never raise.
        with contextlib.suppress(Exception):
            record = log_record.log_record
            flags = record.trace_flags
            if record.trace_id and flags is not None and not flags.sampled:
                return  # its span is not sampled: not judged (SafetySpanProcessor)
            event = genai_event(
                event_name(record.event_name, record.attributes),
                record.trace_id,
                record.span_id,
                record.timestamp or record.observed_timestamp,
                record.attributes,
                record.body,
            )
            if event is not None:
                self.engine.submit(event)

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Nothing held here; the span processor flushes the engine."""
        return True

    def shutdown(self) -> None:
        """The engine belongs to the span processor, which shuts it down."""
