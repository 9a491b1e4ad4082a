"""Spans waiting for their judgement, held in a form the app's garbage collector skips.

While detection is behind (a burst, or the detectors still building), the spans wait in
the application's heap, and each of CPython's full collections walks every object there.
An ended SDK span is about a dozen tracked objects: the span, its context and trace flags,
an attributes container, event and link lists, and a lock in each of those three. Parked,
it is one plain tuple of strings, numbers and tuples of them, which the collector stops
tracking at its first pass (CPython untracks such tuples), so a backlog of parked spans
costs the app's full collections almost nothing (`bench/bench_app_overhead.py`). The
engine parks a span as it is queued behind more than a batch, while its objects are fresh
in memory and before any collection has walked them; the ones it takes come back one batch
at a time.

The objects every span of a provider shares (its resource, its instrumentation scope) are
kept once, in a bounded table, and named in the tuple by number. A parked span comes back
as an equal `ReadableSpan`: the same values, the same shared objects. Only what can be
unwrapped without loss is: attributes none of which were dropped, and event and link lists
that are empty. Anything else (a subclass of ReadableSpan, a list that dropped items) is
kept as it is, and the tuple holding it is then tracked, which costs speed, never data.
"""

from __future__ import annotations

import threading
from typing import Any

from opentelemetry.attributes import BoundedAttributes
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.util import BoundedList
from opentelemetry.trace import SpanContext, SpanKind, TraceFlags
from opentelemetry.trace.span import DEFAULT_TRACE_STATE, TraceState

__all__ = ["ParkedSpan", "is_parked", "park", "unpark"]

ParkedSpan = tuple  # a plain tuple, or the collector would keep tracking it
SHARED_LIMIT = 1024  # (resource, scope) pairs kept by number; past it, kept in each tuple

_shared: list[Any] = []
_numbers: dict[tuple[int, int, int], int] = {}  # their ids -> their index in _shared
_shared_lock = threading.Lock()
# The last three looked up and their number, as one tuple: swapped whole, read whole.
_last: tuple[Any, ...] = (object(), None, None, None)
_KINDS = {kind.value: kind for kind in SpanKind}
_KIND_NUMBERS = {kind: kind.value for kind in SpanKind}
_UNSET = ReadableSpan("parking").status  # the status object every span starts with


def is_parked(item: object) -> bool:
    return type(item) is tuple


def park(span: ReadableSpan) -> ParkedSpan | ReadableSpan:
    """The span as one tuple, or the span itself when it cannot be parked whole."""
    if type(span) is not ReadableSpan:
        return span
    try:
        attributes: Any = span._attributes
        if type(attributes) is BoundedAttributes and not attributes.dropped:
            attributes = tuple(attributes._dict.items())
        context, parent, status = span._context, span._parent, span._status
        return (
            span._name,
            context[0],  # SpanContext is a tuple: trace and span id, remote, flags, state
            context[1],
            context[2],
            int(context[3]),
            _state(context[4]),
            None if parent is None else _parent_fields(parent),
            attributes,
            _unwrapped(span._events),
            _unwrapped(span._links),
            _KIND_NUMBERS[span._kind],
            None if status is _UNSET else status,
            span._start_time,
            span._end_time,
            _number(span._resource, span._instrumentation_scope, span._instrumentation_info),
        )
    except (AttributeError, IndexError, KeyError, TypeError):  # laid out otherwise: keep it
        return span


def unpark(parked: ParkedSpan) -> ReadableSpan:
    (name, trace_id, span_id, is_remote, flags, state, parent, attributes, events, links, kind,
     status, start, end, origin) = parked  # fmt: skip
    resource, scope, info = _shared[origin] if type(origin) is int else origin
    return ReadableSpan(
        name=name,
        context=SpanContext(trace_id, span_id, is_remote, TraceFlags(flags), state),
        parent=None if parent is None else _parent(parent),
        resource=resource,
        attributes=dict(attributes) if type(attributes) is tuple else attributes,
        events=events,
        links=links,
        kind=_KINDS[kind],
        instrumentation_info=info,
        status=_UNSET if status is None else status,
        start_time=start,
        end_time=end,
        instrumentation_scope=scope,
    )


def _state(state: TraceState) -> TraceState | None:
    """None for the default (empty) trace state, which SpanContext puts back by itself."""
    return None if state is DEFAULT_TRACE_STATE else state


def _parent_fields(parent: SpanContext) -> tuple:
    return (parent[0], parent[1], parent[2], int(parent[3]), _state(parent[4]))


def _parent(fields: tuple) -> SpanContext:
    trace_id, span_id, is_remote, flags, state = fields
    return SpanContext(trace_id, span_id, is_remote, TraceFlags(flags), state)


def _number(resource: object, scope: object, info: object) -> object:
    """The number of a span's resource and scopes in the table (past the limit, the three)."""
    global _last
    last = _last
    if resource is last[0] and scope is last[1] and info is last[2]:
        return last[3]  # a provider's spans come in runs: the same three as the one before
    number = _looked_up(resource, scope, info)
    if type(number) is int:
        _last = (resource, scope, info, number)
    return number


def _looked_up(resource: object, scope: object, info: object) -> object:
    key = (id(resource), id(scope), id(info))
    number = _numbers.get(key)
    if number is not None:
        return number
    with _shared_lock:
        number = _numbers.get(key)
        if number is None:
            if len(_shared) >= SHARED_LIMIT:
                return (resource, scope, info)
            number = _numbers[key] = len(_shared)
            _shared.append((resource, scope, info))  # held here, so the ids stay theirs
    return number


def _unwrapped(items: object) -> object:
    """An empty list that dropped nothing as an empty tuple; anything else unchanged."""
    if type(items) is BoundedList and not items.dropped and not items._dq:  # no len(): slow
        return ()
    return items
