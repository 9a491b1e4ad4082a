"""`SafetySpanProcessor`: the in-process entry point, a drop-in for BatchSpanProcessor."""

from __future__ import annotations

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor

from otel_safety.engine import AgentStarted, SafetyEngine
from otel_safety.mapping import is_agent_run
from otel_safety.mapping.attributes import span_attributes


class SafetySpanProcessor(SpanProcessor):
    """Hands ended spans to the engine; annotated copies reach the engine's sinks.

    Use it instead of (not beside) a BatchSpanProcessor for the same exporter, or the
    backend receives every span twice, once without annotations. Like that processor, it
    takes only sampled spans: one a sampler recorded without sampling it (RECORD_ONLY) is
    neither judged, stored nor exported, only counted (`spans_unsampled` in the stats), so
    that the store and the findings hold the traces the backend holds.
    """

    def __init__(self, engine: SafetyEngine) -> None:
        self.engine = engine

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        # Announcing agent runs lets a trace be judged when its runs end, even if its root
        # (a chat session, a worker loop) stays open much longer. (try, not
        # contextlib.suppress: that builds an object and calls two methods on every span.)
        try:
            if span.context.trace_flags.sampled and is_agent_run(span_attributes(span)):
                self.engine.submit(AgentStarted(span.context.trace_id))
        except Exception:  # never raise into the app
            pass

    def on_end(self, span: ReadableSpan) -> None:
        # The application's thread: enqueue only, never block, never raise.
        try:
            if span.context.trace_flags.sampled:
                self.engine.submit(span)
            else:
                self.engine.skipped_unsampled()
        except Exception:  # never raise into the app
            pass

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self.engine.force_flush(timeout_millis)

    def shutdown(self) -> None:
        self.engine.shutdown()
