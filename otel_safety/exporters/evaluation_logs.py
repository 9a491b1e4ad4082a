"""Findings as `gen_ai.evaluation.result` events through the OpenTelemetry Logs API.

OpenTelemetry sends new events as log records, not span events. Each fired finding becomes
one log record parented to the span it judges (its trace and span id), with the same
evaluation attributes as the span event and `gen_ai.response.id` when the span or its
log events name one.
The records go to a `LoggerProvider`, whose own processors and exporters send them on.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from opentelemetry import trace
from opentelemetry._logs import LoggerProvider, LogRecord
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from otel_safety import semconv as sc
from otel_safety.annotate import evaluation_attributes, finding_target, local_root
from otel_safety.mapping import span_id_hex
from otel_safety.mapping.log_events import RESPONSE_ID as GEN_AI_RESPONSE_ID
from otel_safety.pipeline import TraceEvaluation

if TYPE_CHECKING:
    from otel_safety.deep import DeepResult

SCOPE = "otel_safety"


class EvaluationLogSink:
    """A sink that emits one log record per fired finding of each evaluated trace."""

    def __init__(self, provider: LoggerProvider) -> None:
        self.provider = provider
        self.logger = provider.get_logger(SCOPE)
        self.emitted = 0

    def write(self, evaluations: Sequence[TraceEvaluation]) -> None:
        for evaluation in evaluations:
            for record, _span in evaluation_records(evaluation):
                self.logger.emit(record)
                self.emitted += 1

    def write_deep(self, results: Sequence[DeepResult]) -> None:
        """One record per deep analysis that gave a verdict (errors give none)."""
        for result in results:
            record = deep_record(result)
            if record is not None:
                self.logger.emit(record)
                self.emitted += 1

    def tick(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        flush = getattr(self.provider, "force_flush", None)
        return bool(flush(timeout_millis)) if flush is not None else True

    def shutdown(self) -> None:
        """The provider belongs to whoever made it (configure() shuts its own down)."""


def deep_record(result: DeepResult) -> LogRecord | None:
    """The `gen_ai.evaluation.result` record of one deep analysis, on the trace's root span,
    naming the evaluator (`deep_analysis`), its model and its prompt version."""
    finding = result.finding
    if finding is None or not result.root_trace_id or not result.root_span_int:
        return None
    details = finding.details or {}
    attributes: dict[str, Any] = {
        **evaluation_attributes(finding),
        sc.GEN_AI_EVALUATION_SCORE_LABEL: details.get("verdict", "unknown"),
        sc.OTEL_SAFETY_DEEP_VERDICT: details.get("verdict", "unknown"),
        sc.OTEL_SAFETY_DEEP_MODEL: result.model,
        sc.OTEL_SAFETY_DEEP_PROMPT_VERSION: result.prompt_version,
    }
    parent = SpanContext(
        result.root_trace_id,
        result.root_span_int,
        is_remote=False,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
    )
    return LogRecord(
        timestamp=time.time_ns(),
        context=trace.set_span_in_context(NonRecordingSpan(parent)),
        event_name=sc.GEN_AI_EVALUATION_RESULT,
        attributes=attributes,
    )


def evaluation_records(evaluation: TraceEvaluation) -> list[tuple[LogRecord, ReadableSpan]]:
    """One `gen_ai.evaluation.result` log record per fired finding, with the span it is on."""
    fired = [f for f in evaluation.findings if f.detected]
    if not fired:
        return []
    spans = {span_id_hex(s.context.span_id): s for s in evaluation.spans}
    root = local_root(evaluation.spans)
    root_id = span_id_hex(root.context.span_id) if root else None
    records = []
    for finding in fired:
        target = spans.get(finding_target(finding, set(spans), root_id) or "")
        if target is None:
            continue
        attributes: dict[str, Any] = evaluation_attributes(finding)
        response_id = evaluation.response_ids.get(span_id_hex(target.context.span_id))
        if response_id is not None:
            attributes[GEN_AI_RESPONSE_ID] = response_id
        parent = SpanContext(
            target.context.trace_id,
            target.context.span_id,
            is_remote=False,
            trace_flags=TraceFlags(TraceFlags.SAMPLED),
        )
        record = LogRecord(
            timestamp=target.end_time or target.start_time,
            context=trace.set_span_in_context(NonRecordingSpan(parent)),
            event_name=sc.GEN_AI_EVALUATION_RESULT,
            attributes=attributes,
        )
        records.append((record, target))
    return records
