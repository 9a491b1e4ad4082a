"""Export-time annotation: finished SDK spans are immutable, so we export annotated copies.

Only the public `ReadableSpan` constructor is used. Spans that gain nothing are passed on
as the very same objects.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.trace import Status

from otel_safety import guardrail
from otel_safety import semconv as sc
from otel_safety.content_capture import NO_CONTENT_NOTE, unjudged_spans_note
from otel_safety.mapping import span_id_hex
from otel_safety.model import EscalationLevel, Finding, strongest_per_span
from otel_safety.policy import raised_by_policy

EVALUATION_LABEL = "flagged"


def local_root(spans: Sequence[ReadableSpan]) -> ReadableSpan | None:
    """The span a trace-level verdict goes on: no parent here, else the earliest orphan."""
    ids = {s.context.span_id for s in spans}
    candidates = [
        s for s in spans if s.parent is None or s.parent.is_remote or s.parent.span_id not in ids
    ]
    return min(candidates, key=lambda s: s.start_time or 0, default=None)


def annotate(
    spans: Sequence[ReadableSpan],
    findings: Sequence[Finding],
    level: EscalationLevel,
    reason: str,
    dialects: Mapping[str, str],
    notes: Mapping[str, Sequence[str]],
    span_events: bool = True,
) -> list[ReadableSpan]:
    """Copies of `spans` carrying the safety attributes and, with `span_events`, one
    `gen_ai.evaluation.result` span event per fired finding (else those go out as log
    records only: `exporters/evaluation_logs.py`)."""
    root = local_root(spans)
    root_id = span_id_hex(root.context.span_id) if root else None
    present = {span_id_hex(s.context.span_id) for s in spans}
    by_span: dict[str, list[Finding]] = defaultdict(list)
    for finding in findings:
        target = finding_target(finding, present, root_id)
        if target:
            by_span[target].append(finding)

    annotated = []
    for span in spans:
        sid = span_id_hex(span.context.span_id)
        span = _without_our_verdicts(span)
        extra: dict[str, Any] = {}
        if sid in dialects:
            extra[sc.OTEL_SAFETY_MAPPING_DIALECT] = dialects[sid]
        if notes.get(sid):
            extra[sc.OTEL_SAFETY_NOTES] = tuple(notes[sid])
        events = _finding_attributes(by_span.get(sid, []), extra, span.end_time or 0)
        if not span_events:
            events = []
        if sid == root_id:
            extra.update(_trace_attributes(findings, level, reason))
            unjudged = sum(NO_CONTENT_NOTE in said for said in notes.values())
            if unjudged:
                own = tuple(extra.get(sc.OTEL_SAFETY_NOTES, ()))
                extra[sc.OTEL_SAFETY_NOTES] = (*own, unjudged_spans_note(unjudged))
        annotated.append(copy_span(span, extra, events) if extra else span)
    return annotated


# The attributes this judgement writes: on a span that arrives with them (a producer's
# forgery, or an earlier judge's in a chained `serve`), they are this judge's to say. The
# guard's inline verdicts stay: they are signed, and checked where they are read.
_VERDICT_PREFIXES = (
    "otel_safety.trace.",
    "otel_safety.escalation.",
    "otel_safety.detector.score.",
    "otel_safety.detectors.",
    sc.OTEL_SAFETY_NOTES,
    sc.OTEL_SAFETY_MAPPING_DIALECT,
)


def _without_our_verdicts(span: ReadableSpan) -> ReadableSpan:
    """The span without verdict attributes it arrived with (`escalation.level=NONE` forged
    on a tool span of a HARD_STOP trace misled any reader of the span alone)."""
    attributes = span.attributes or {}
    if not any(key.startswith(_VERDICT_PREFIXES) for key in attributes):
        return span
    kept = {k: v for k, v in attributes.items() if not k.startswith(_VERDICT_PREFIXES)}
    return rebuild_span(span, kept, tuple(span.events))


def _finding_attributes(
    findings: Sequence[Finding], extra: dict[str, Any], timestamp: int
) -> list[Event]:
    if not findings:
        return []
    fired = [f for f in findings if f.detected]
    for finding in strongest_per_span(findings):
        extra[sc.OTEL_SAFETY_DETECTOR_SCORE_PREFIX + finding.detector] = finding.score
    span_level = max((f.escalation for f in fired), default=EscalationLevel.NONE)
    extra[sc.OTEL_SAFETY_ESCALATION_LEVEL] = span_level.name
    extra[sc.OTEL_SAFETY_ESCALATION_RANK] = int(span_level)
    extra.update(guardrail.level_attributes(span_level, fired))
    if fired:
        extra[sc.OTEL_SAFETY_DETECTORS_FIRED] = tuple(f.detector for f in fired)
    uncalibrated = tuple(dict.fromkeys(f.detector for f in findings if f.calibrated is False))
    if uncalibrated:
        extra[sc.OTEL_SAFETY_DETECTORS_UNCALIBRATED] = uncalibrated
    return [_evaluation_event(f, timestamp) for f in fired]


def finding_target(finding: Finding, present: set[str], root_id: str | None) -> str | None:
    """The span a finding is written onto: its own when the trace has it, else the root."""
    return finding.span_id if finding.span_id in present else root_id


def _evaluation_event(finding: Finding, timestamp: int) -> Event:
    return Event(sc.GEN_AI_EVALUATION_RESULT, evaluation_attributes(finding), timestamp)


def evaluation_attributes(finding: Finding) -> dict[str, Any]:
    """The attributes of one `gen_ai.evaluation.result` event, span event or log record."""
    attributes: dict[str, Any] = {
        sc.GEN_AI_EVALUATION_NAME: finding.detector,
        sc.GEN_AI_EVALUATION_SCORE_VALUE: finding.score,
        sc.GEN_AI_EVALUATION_SCORE_LABEL: EVALUATION_LABEL,
        sc.GEN_AI_EVALUATION_EXPLANATION: finding.explanation,
        sc.OTEL_SAFETY_FINDING_SEVERITY: finding.severity.value,
        sc.OTEL_SAFETY_FINDING_THRESHOLD: finding.threshold,
        sc.OTEL_SAFETY_FINDING_ESCALATION_LEVEL: finding.escalation.name,
        **guardrail.finding_attributes(finding),
    }
    if finding.calibrated is not None:
        attributes[sc.OTEL_SAFETY_FINDING_CALIBRATED] = finding.calibrated
    return attributes


def _trace_attributes(
    findings: Sequence[Finding], level: EscalationLevel, reason: str
) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        sc.OTEL_SAFETY_EVALUATED: True,
        sc.OTEL_SAFETY_TRACE_ESCALATION_LEVEL: level.name,
        sc.OTEL_SAFETY_TRACE_ESCALATION_RANK: int(level),
        sc.OTEL_SAFETY_TRACE_EVALUATION_REASON: reason,
        **guardrail.level_attributes(level, findings),
    }
    fired = list(dict.fromkeys(f.detector for f in findings if f.detected))
    if fired:
        attributes[sc.OTEL_SAFETY_TRACE_DETECTORS_FIRED] = tuple(fired)
    if raised_by_policy(findings, level):
        attributes[sc.OTEL_SAFETY_TRACE_ESCALATION_BY_POLICY] = True
    return attributes


def with_run_verdict(
    spans: Sequence[ReadableSpan],
    level: EscalationLevel,
    fired: Sequence[str],
    by_policy: bool,
    reason: str,
) -> list[ReadableSpan]:
    """`spans` with their local root carrying the verdict of the whole run, where earlier
    parts of it were judged stricter (`otel_safety/run_verdicts.py`)."""
    root = local_root(spans)
    if root is None:
        return list(spans)
    attributes = dict(root.attributes or {})
    attributes.setdefault(sc.OTEL_SAFETY_TRACE_EVALUATION_REASON, reason)
    attributes.update(
        {
            sc.OTEL_SAFETY_EVALUATED: True,
            sc.OTEL_SAFETY_TRACE_ESCALATION_LEVEL: level.name,
            sc.OTEL_SAFETY_TRACE_ESCALATION_RANK: int(level),
            sc.GEN_AI_GUARDRAIL_VERDICT_TYPE: guardrail.verdict_type(level),
        }
    )
    if fired:
        attributes[sc.OTEL_SAFETY_TRACE_DETECTORS_FIRED] = tuple(fired)
    attributes.pop(sc.OTEL_SAFETY_TRACE_ESCALATION_BY_POLICY, None)
    if by_policy:
        attributes[sc.OTEL_SAFETY_TRACE_ESCALATION_BY_POLICY] = True
    raised = rebuild_span(root, attributes, root.events)
    return [raised if span is root else span for span in spans]


def copy_span(
    span: ReadableSpan, extra: Mapping[str, Any], events: Sequence[Event] = ()
) -> ReadableSpan:
    """A finished span with attributes merged over and events appended (public API only).
    An evaluation event the span already carries for a detector that judged it again (spans
    passed through a second otel-safety, a chained `serve`) is replaced, not repeated."""
    judged = {
        (event.attributes or {}).get(sc.GEN_AI_EVALUATION_NAME)
        for event in events
        if event.name == sc.GEN_AI_EVALUATION_RESULT
    }
    kept = [
        event
        for event in span.events
        if event.name != sc.GEN_AI_EVALUATION_RESULT
        or (event.attributes or {}).get(sc.GEN_AI_EVALUATION_NAME) not in judged
    ]
    return rebuild_span(span, {**(span.attributes or {}), **extra}, (*kept, *events))


def rebuild_span(
    span: ReadableSpan,
    attributes: Mapping[str, Any],
    events: Sequence[Event],
    *,
    name: str | None = None,
    status: Status | None = None,
    resource: Resource | None = None,
) -> ReadableSpan:
    """The same finished span with these attributes and events instead of its own (and
    this name, status or resource, when given)."""
    return ReadableSpan(
        name=span.name if name is None else name,
        context=span.context,
        parent=span.parent,
        resource=span.resource if resource is None else resource,
        attributes=attributes,
        events=events,
        links=span.links,
        kind=span.kind,
        status=span.status if status is None else status,
        start_time=span.start_time,
        end_time=span.end_time,
        instrumentation_scope=span.instrumentation_scope,
    )
