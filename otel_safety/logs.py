"""GenAI events sent as log records: recognised, read into plain data, tied to their span.

Instrumentations put message content in log records (the OpenTelemetry Logs API) rather
than on spans: the older per-message events (`gen_ai.user.message`, `gen_ai.choice`, ...)
and the newer `gen_ai.client.inference.operation.details`. A log record names its span by
trace and span id; the engine holds these events with their trace and the mapping reads them
as part of that span, so content that arrives as logs is judged like content on spans.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

OPERATION_DETAILS = "gen_ai.client.inference.operation.details"
# The event forms whose content is read; everything else is not ours to judge.
MESSAGE_EVENTS = frozenset(
    {
        "gen_ai.system.message",
        "gen_ai.user.message",
        "gen_ai.assistant.message",
        "gen_ai.tool.message",
        "gen_ai.choice",
        "gen_ai.content.prompt",
        "gen_ai.content.completion",
    }
)
GENAI_EVENTS = MESSAGE_EVENTS | {OPERATION_DETAILS}
# Keys of the details event that the span-attribute reader understands.
DETAILS_KEYS = (
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.system_instructions",
)


@dataclass(frozen=True)
class LogEvent:
    """One GenAI event from a log record: its span, name, time, attributes and body."""

    trace_id: int
    span_id: int
    name: str
    timestamp: int
    attributes: Mapping[str, Any] = field(default_factory=dict)
    body: Any = None

    @property
    def weight(self) -> int:
        """Rough size in bytes, for the trace buffer's memory budget: a fixed overhead plus
        the length of its texts (what makes an event large: messages)."""
        return 256 + _text_bytes(self.body) + sum(map(_text_bytes, self.attributes.values()))


def _text_bytes(value: Any, depth: int = 0) -> int:
    if isinstance(value, str | bytes):
        return len(value)
    if depth > 8:  # deeper nesting counted flat: a bound on the work, not on the estimate
        return 8
    if isinstance(value, Mapping):
        return sum(len(str(k)) + _text_bytes(v, depth + 1) for k, v in value.items())
    if isinstance(value, list | tuple):
        return sum(_text_bytes(item, depth + 1) for item in value)
    return 8


def event_name(name: str | None, attributes: Mapping[str, Any] | None) -> str:
    """The event name of a log record: its own field, else the older `event.name` attribute."""
    if name:
        return name
    legacy = (attributes or {}).get("event.name")
    return legacy if isinstance(legacy, str) else ""


def genai_event(
    name: str,
    trace_id: int | None,
    span_id: int | None,
    timestamp: int | None,
    attributes: Mapping[str, Any] | None,
    body: Any,
) -> LogEvent | None:
    """A `LogEvent` when the record is a GenAI event tied to a span, else None.

    Only the message-bearing events are read: our own `gen_ai.evaluation.result` records,
    which go out through the same LoggerProvider, are results, not input to judge.
    """
    if name not in GENAI_EVENTS:
        return None
    if not trace_id or not span_id:  # not correlated to a span: nothing to attach it to
        return None
    return LogEvent(
        trace_id=trace_id,
        span_id=span_id,
        name=name,
        timestamp=timestamp or 0,
        attributes=attributes if attributes is not None else {},  # read, never changed
        body=body,
    )
