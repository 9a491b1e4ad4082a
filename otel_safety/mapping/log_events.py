"""Spans as the mapping should read them: with the GenAI events that arrived as log records.

The copies made here are for judging only; the spans exported and stored stay as the
application made them. Message events become span events (the older event form the GenAI
reader already knows); an operation-details event lends its `gen_ai.*.messages` attributes
to its span when the span has none of its own.
"""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from opentelemetry.sdk.trace import Event, ReadableSpan

from otel_safety.annotate import rebuild_span
from otel_safety.logs import DETAILS_KEYS, MESSAGE_EVENTS, OPERATION_DETAILS, LogEvent

RESPONSE_ID = "gen_ai.response.id"
logger = logging.getLogger(__name__)


def with_log_events(
    spans: Sequence[ReadableSpan], events: Sequence[LogEvent]
) -> list[ReadableSpan]:
    """`spans`, those that log events name replaced by copies that carry them."""
    if not events:
        return list(spans)
    by_span: dict[int, list[LogEvent]] = defaultdict(list)
    for event in events:
        by_span[event.span_id].append(event)
    return [
        _joined(span, by_span[span.context.span_id]) if span.context.span_id in by_span else span
        for span in spans
    ]


def response_ids(spans: Sequence[ReadableSpan], events: Sequence[LogEvent]) -> dict[str, str]:
    """`gen_ai.response.id` per span id (16 hex), from the span or else its log events."""
    ids = {}
    for event in events:
        value = event.attributes.get(RESPONSE_ID)
        if value is not None:
            ids[f"{event.span_id:016x}"] = str(value)
    for span in spans:
        value = (span.attributes or {}).get(RESPONSE_ID)
        if value is not None:
            ids[f"{span.context.span_id:016x}"] = str(value)
    return ids


def matched(spans: Sequence[ReadableSpan], events: Sequence[LogEvent]) -> int:
    """How many of `events` name a span among `spans`."""
    ids = {span.context.span_id for span in spans}
    return sum(event.span_id in ids for event in events)


def _joined(span: ReadableSpan, events: list[LogEvent]) -> ReadableSpan:
    """The span with its events, or the span alone if they cannot be read (never raises:
    a malformed record must not cost the trace its judgement)."""
    try:
        return _with_events(span, events)
    except Exception:
        logger.exception(
            "otel-safety could not read the log events of span %x", span.context.span_id
        )
        return span


def _with_events(span: ReadableSpan, events: list[LogEvent]) -> ReadableSpan:
    attributes = dict(span.attributes or {})
    span_events = list(span.events)
    for event in sorted(events, key=lambda e: e.timestamp):
        if event.name == OPERATION_DETAILS:
            for key in DETAILS_KEYS:
                if key in event.attributes and key not in attributes:
                    attributes[key] = _attribute_value(event.attributes[key])
        elif event.name in MESSAGE_EVENTS:
            span_events.append(Event(event.name, _event_attributes(event), event.timestamp))
    return rebuild_span(span, attributes, span_events)


def _event_attributes(event: LogEvent) -> dict[str, Any]:
    """The log record's attributes, and its body under `body` (as JSON: span-event
    attributes hold only primitive values)."""
    attributes = {k: _attribute_value(v) for k, v in event.attributes.items()}
    if event.body is not None:
        attributes["body"] = _attribute_value(event.body)
    return attributes


def _attribute_value(value: Any) -> Any:
    if isinstance(value, str | bool | int | float):
        return value
    try:
        return json.dumps(_plain(value), ensure_ascii=False)
    except (TypeError, ValueError):
        return str(value)


def _plain(value: Any) -> Any:
    """Mappings and sequences of the Logs API (maybe immutable wrappers) as JSON-able data."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, str | bool | int | float) or value is None:
        return value
    if hasattr(value, "items"):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return str(value)
