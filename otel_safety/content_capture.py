"""What to say when a GenAI span carries no content: nothing in it could be judged.

Instrumentations can leave message text and tool arguments out (content capture off), and a
trace without content looks clean to every detector. Such spans are named instead: a note on
the span (`spans.notes` in the store), a count in `status`, `serve`'s summary and metrics.
"""

from __future__ import annotations

NO_CONTENT_NOTE = (
    "no content captured: the instrumentation recorded no messages or tool arguments on "
    "this span or in log events for it, so it was not judged; turn its content capture on "
    "(content sent as log events is read from the LoggerProvider configure() joins, or "
    "the one given to create_processor as logger_provider=)"
)
NO_CONTENT_PATTERN = "no content captured:%"  # SQL LIKE over one note


def unjudged_spans_note(count: int) -> str:
    """The note on a trace's root when some of its spans carried no content: a tail sampler
    or a reader of the root alone would otherwise see a clean, allowed run."""
    return (
        f"judged without content: {count} model or tool span(s) of this trace carried none "
        "(see their notes), so its verdict says nothing of what they did"
    )


# The setting that turns content capture on, per instrumentation (the README lists them too).
CAPTURE_SETTINGS = {
    "openai-v2 (opentelemetry-instrumentation-openai-v2)": (
        "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=SPAN_ONLY (or EVENT_ONLY / "
        "SPAN_AND_EVENT: content as log records, read with configure() or serve)"
    ),
    "OpenInference": "OPENINFERENCE_HIDE_INPUTS=false OPENINFERENCE_HIDE_OUTPUTS=false "
    "(and the other OPENINFERENCE_HIDE_* left unset or false)",
    "OpenLLMetry (Traceloop)": "TRACELOOP_TRACE_CONTENT=true",
    "pydantic-ai": "InstrumentationSettings(include_content=True) (the default)",
}
