"""`SafetySpanProcessor`: the in-process entry point, a drop-in for BatchSpanProcessor."""

from __future__ import annotations

import contextlib

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor

from otel_safety.engine import SafetyEngine


class SafetySpanProcessor(SpanProcessor):
    """Hands ended spans to the engine; annotated copies reach the engine's sinks.

    Use it instead of (not beside) a BatchSpanProcessor for the same exporter, or the
    backend receives every span twice, once without annotations.
    """

    def __init__(self, engine: SafetyEngine) -> None:
        self.engine = engine

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        return None

    def on_end(self, span: ReadableSpan) -> None:
        # The application's thread: enqueue only, never block, never raise.
        with contextlib.suppress(Exception):
            self.engine.submit(span)

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self.engine.force_flush(timeout_millis)

    def shutdown(self) -> None:
        self.engine.shutdown()
