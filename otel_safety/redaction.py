"""Mask secrets in what leaves the pipeline: stored and forwarded spans, stored trajectories,
and the log records `serve` forwards.

Detectors judge the spans as they came (a key in a tool's arguments is what the guard must
see); only afterwards, when `redact_secrets` is on (the default for `serve`), each string
attribute of each span and span event, and each string of the trajectory, has its secrets
replaced by [REDACTED] (see `analysis.secrets`). Findings' evidence is always masked.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from opentelemetry.sdk.trace import Event, ReadableSpan

from otel_safety.analysis.secrets import mask
from otel_safety.annotate import rebuild_span
from otel_safety.model import Trajectory
from otel_safety.pipeline import TraceEvaluation
from otel_safety.repeated_masks import RepeatedTextMasker

__all__ = ["redact_evaluation", "redact_value"]

Masker = Callable[[str], tuple[str, int]]


def redact_evaluation(evaluation: TraceEvaluation) -> int:
    """Mask the evaluation's spans and trajectory in place; how many secrets were masked.
    The histories the trace's model calls resend are masked once (`RepeatedTextMasker`)."""
    masked = 0
    spans = []
    masker = RepeatedTextMasker()
    for span in evaluation.spans:
        copy, count = _span(span, masker.mask)
        spans.append(copy)
        masked += count
    evaluation.spans = spans
    if evaluation.trajectory is not None:
        document, count = _value(evaluation.trajectory.model_dump())
        if count:
            evaluation.trajectory = Trajectory.model_validate(document)
            masked += count
    return masked


def redact_value(value: Any) -> tuple[Any, int]:
    """A log record's body or attributes with the secrets in every string masked; how many."""
    return _value(value)


def _span(span: ReadableSpan, masker: Masker) -> tuple[ReadableSpan, int]:
    attributes, count = _value(dict(span.attributes or {}), masker)
    events, event_count = [], 0
    for event in span.events:
        event_attributes, found = _value(dict(event.attributes or {}), masker)
        event_count += found
        events.append(Event(event.name, event_attributes, event.timestamp) if found else event)
    if not count and not event_count:
        return span, 0
    copy = rebuild_span(span, attributes, events)
    return copy, count + event_count


def _value(value: Any, masker: Masker = mask) -> tuple[Any, int]:
    if isinstance(value, str):
        return masker(value)
    if isinstance(value, dict):
        total, out = 0, {}
        for key, item in value.items():
            out[key], count = _value(item, masker)
            total += count
        return out, total
    if isinstance(value, list | tuple):
        total, items = 0, []
        for item in value:
            masked, count = _value(item, masker)
            items.append(masked)
            total += count
        return (tuple(items) if isinstance(value, tuple) else items), total
    return value, 0
