"""Mask secrets in what leaves the pipeline: stored and forwarded spans, stored trajectories,
and the log records `serve` forwards.

Detectors judge the spans as they came (a key in a tool's arguments is what the guard must
see); only afterwards, when `redact_secrets` is on (the default for `serve`), each string
attribute of each span, span event and resource, each span's name and status message, and
each string of the trajectory, has its secrets replaced by [REDACTED] (see
`analysis.secrets`). Findings' evidence is always masked.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.trace import Status

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
    resources: dict[int, tuple[Resource, int]] = {}  # spans share their resource: masked once
    for span in evaluation.spans:
        copy, count = _span(span, masker.mask, resources)
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


def _span(
    span: ReadableSpan, masker: Masker, resources: dict[int, tuple[Resource, int]]
) -> tuple[ReadableSpan, int]:
    """The span with its secrets masked wherever a span carries text: attributes, events,
    its name, its status and its resource (`app.db_url` set by the app)."""
    attributes, count = _value(dict(span.attributes or {}), masker)
    events, event_count = [], 0
    for event in span.events:
        event_attributes, found = _value(dict(event.attributes or {}), masker)
        event_count += found
        events.append(Event(event.name, event_attributes, event.timestamp) if found else event)
    name, name_count = masker(span.name) if span.name else (span.name, 0)
    status, status_count = span.status, 0
    if span.status.description:
        description, status_count = masker(span.status.description)
        status = Status(span.status.status_code, description) if status_count else status
    resource, resource_count = _resource(span.resource, resources)
    total = count + event_count + name_count + status_count + resource_count
    if not total:
        return span, 0
    copy = rebuild_span(span, attributes, events, name=name, status=status, resource=resource)
    return copy, total


def _resource(
    resource: Resource | None, seen: dict[int, tuple[Resource, int]]
) -> tuple[Resource | None, int]:
    """The resource with its secrets masked (counted for its first span only)."""
    if resource is None:
        return None, 0
    if id(resource) in seen:
        return seen[id(resource)][0], 0
    attributes, count = _value(dict(resource.attributes), mask)
    masked = Resource(attributes, resource.schema_url) if count else resource
    seen[id(resource)] = (masked, count)
    return masked, count


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
