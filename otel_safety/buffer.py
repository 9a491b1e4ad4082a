"""Group ended spans by trace and decide when a trace is ready to judge.

A trace is released when its local root ends (or `log_wait` after, where log records for
its spans may still be on their way, as for a model call that came without content); when
the agent runs whose starts were announced (in-process, from span starts) have all ended, so
a long-lived root such as a chat session does not hold its runs back; when no span of it
has arrived for the decision wait; or, when memory limits are reached, oldest first with
what is known. Nothing is ever dropped: every span added comes back out in exactly one
release.
Not thread-safe; the engine serialises access.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

from opentelemetry.sdk.trace import ReadableSpan

from otel_safety.logs import LogEvent
from otel_safety.mapping import is_agent_run
from otel_safety.mapping.genai import AGENT_OPERATIONS

ROOT_ENDED = "root_ended"
AGENT_ENDED = "agent_ended"
DECISION_WAIT = "decision_wait"
OVERFLOW = "overflow"
FLUSH = "flush"


@dataclass
class Release:
    """The spans of one trace handed to the pipeline, and why now; with the GenAI events
    that arrived as log records for it."""

    trace_id: int
    spans: list[ReadableSpan]
    reason: str
    events: list[LogEvent] = field(default_factory=list)


@dataclass
class _Pending:
    spans: list[ReadableSpan] = field(default_factory=list)
    events: list[LogEvent] = field(default_factory=list)
    last_seen: float = 0.0
    bytes: int = 0
    root_ended: float | None = None  # when its local root ended, while its wait runs
    waits: float = 0.0  # seconds it waits for log records once its root ended
    awaits_content: bool = False  # a GenAI model span came without content


SPAN_OVERHEAD = 512  # the span object, its context, resource and scope references


def span_bytes(span: ReadableSpan) -> int:
    """A span's weight for the memory budget: a fixed overhead plus the length of its
    attribute and event texts (what makes a span large: messages, tool arguments)."""
    total = SPAN_OVERHEAD
    for value in (span.attributes or {}).values():
        total += _value_bytes(value)
    for event in span.events:
        for value in (event.attributes or {}).values():
            total += _value_bytes(value)
    return total


def _value_bytes(value: object) -> int:
    if isinstance(value, str | bytes):
        return len(value)
    if isinstance(value, tuple | list):
        return sum(_value_bytes(item) for item in value)
    return 8


def _deadline(pending: _Pending, decision_wait: float) -> float:
    idle = pending.last_seen + decision_wait
    return idle if pending.root_ended is None else min(idle, pending.root_ended + pending.waits)


# Operations whose content is the model's conversation, which an instrumentation may send as
# log records instead of span attributes (openai-v2's EVENT_ONLY).
_NOT_MODEL_CALLS = frozenset({"execute_tool", "embeddings", *AGENT_OPERATIONS})
_CONTENT_KEYS = ("gen_ai.input.messages", "gen_ai.output.messages")


def _without_content(span: ReadableSpan) -> bool:
    """A GenAI model call with no messages on the span: its content may come as log records."""
    attributes = span.attributes or {}
    operation = attributes.get("gen_ai.operation.name")
    if not isinstance(operation, str) or operation in _NOT_MODEL_CALLS:
        return False  # none, or not a name at all (a map sent over OTLP)
    if any(key in attributes for key in _CONTENT_KEYS):
        return False
    return not any(event.name.startswith("gen_ai.") for event in span.events)


def roots_last(spans: Sequence[ReadableSpan]) -> list[ReadableSpan]:
    """The spans in their order, local roots moved to the end: a request or file line may
    list a root before its children, and a root's end releases its trace."""
    return sorted(spans, key=_is_local_root)


def _is_local_root(span: ReadableSpan) -> bool:
    return span.parent is None or span.parent.is_remote


class TraceBuffer:
    def __init__(
        self,
        max_traces: int = 10_000,
        max_spans: int = 200_000,
        decision_wait: float = 30.0,
        max_bytes: int = 512 << 20,
    ):
        if max_traces < 1 or max_spans < 1 or max_bytes < 1:
            raise ValueError("max_traces, max_spans and max_bytes must be at least 1")
        if decision_wait < 0:
            raise ValueError("decision_wait must not be negative")
        self.max_traces = max_traces
        self.max_spans = max_spans
        self.decision_wait = decision_wait
        self.max_bytes = max_bytes
        # Seconds a trace whose root ended still waits for log records naming its spans;
        # 0 releases it at once. A receiver sets it once log records arrive at all: spans and
        # logs come in separate requests, in either order.
        self.log_wait = 0.0
        # The same wait for a trace with a model call that carried no content, before any
        # log record arrived: its content may be in records still on their way (the first
        # trace after a receiver starts). A receiver sets it; 0 waits for nothing.
        self.content_wait = 0.0
        self._bytes = 0
        self._pending: OrderedDict[int, _Pending] = OrderedDict()
        self._open_agents: OrderedDict[int, int] = OrderedDict()
        self._span_count = 0

    def __len__(self) -> int:
        return len(self._pending)

    @property
    def span_count(self) -> int:
        return self._span_count

    @property
    def bytes(self) -> int:
        """What the held spans weigh (their text, roughly: see `span_bytes`)."""
        return self._bytes

    def add(self, span: ReadableSpan, now: float) -> list[Release]:
        trace_id = span.context.trace_id
        pending = self._pending.get(trace_id)
        if pending is None:
            pending = self._pending[trace_id] = _Pending()
        pending.spans.append(span)
        pending.last_seen = now
        size = span_bytes(span)
        pending.bytes += size
        self._bytes += size
        self._span_count += 1
        released = []
        if self.content_wait > 0 and not pending.awaits_content:
            pending.awaits_content = _without_content(span)
        if _is_local_root(span):
            self._open_agents.pop(trace_id, None)
            wait = self.log_wait or (self.content_wait if pending.awaits_content else 0.0)
            if wait > 0:
                pending.root_ended, pending.waits = now, wait
            else:
                released.append(self._pop(trace_id, ROOT_ENDED))
        elif trace_id in self._open_agents and is_agent_run(span.attributes):
            self._open_agents[trace_id] -= 1
            if self._open_agents[trace_id] <= 0:
                del self._open_agents[trace_id]
                released.append(self._pop(trace_id, AGENT_ENDED))
        released.extend(self._shed())
        return released

    def add_event(self, event: LogEvent, now: float) -> list[Release]:
        """Hold a log event with its trace until the trace is released. Events never release
        a trace themselves; they count towards the byte budget (and may shed the oldest)."""
        pending = self._pending.get(event.trace_id)
        if pending is None:
            pending = self._pending[event.trace_id] = _Pending()
        pending.events.append(event)
        pending.last_seen = now
        size = event.weight
        pending.bytes += size
        self._bytes += size
        return self._shed()

    def agent_started(self, trace_id: int) -> None:
        """Announce an agent run; its end (with no other run open) releases the trace."""
        self._open_agents[trace_id] = self._open_agents.get(trace_id, 0) + 1
        while len(self._open_agents) > self.max_traces:  # runs that never end
            self._open_agents.popitem(last=False)

    def expired(self, now: float) -> list[Release]:
        """Traces idle for the decision wait (their root may live in another process), and
        traces whose root ended `log_wait` ago."""
        released = []
        for trace_id, pending in list(self._pending.items()):
            if pending.root_ended is not None and now - pending.root_ended >= pending.waits:
                released.append(self._pop(trace_id, ROOT_ENDED))
            elif now - pending.last_seen >= self.decision_wait:
                released.append(self._pop(trace_id, DECISION_WAIT))
        return released

    def next_deadline(self) -> float | None:
        if not self._pending:
            return None
        return min(_deadline(p, self.decision_wait) for p in self._pending.values())

    def drain(self) -> list[Release]:
        return [self._pop(trace_id, FLUSH) for trace_id in list(self._pending)]

    def _shed(self) -> list[Release]:
        released = []
        while self._pending and (
            len(self._pending) > self.max_traces
            or self._span_count > self.max_spans
            or self._bytes > self.max_bytes
        ):
            oldest = next(iter(self._pending))
            released.append(self._pop(oldest, OVERFLOW))
        return released

    def _pop(self, trace_id: int, reason: str) -> Release:
        pending = self._pending.pop(trace_id)
        self._span_count -= len(pending.spans)
        self._bytes -= pending.bytes
        return Release(trace_id, pending.spans, reason, pending.events)
