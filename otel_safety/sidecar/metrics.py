"""The sidecar's own counters, a sink that counts flagged spans, and a rate-limited problem log.

Counters are exposed at `GET /metrics` in the Prometheus text format (any scraper or the
Collector's `prometheus` receiver reads it) and summarised in `GET /health` and at shutdown.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence

from otel_safety import semconv as sc
from otel_safety.deep.names import COUNTERS as DEEP_COUNTERS
from otel_safety.pipeline import TraceEvaluation
from otel_safety.rate_limited import RateLimitedLog
from otel_safety.sink_base import ImmediateSink

logger = logging.getLogger("otel_safety.sidecar")

PREFIX = "otel_safety_sidecar"

# Engine counters worth exposing, with what they count.
ENGINE_COUNTERS = {
    "spans_evaluated": "spans judged by the pipeline and handed to the sinks",
    "traces_evaluated": "traces judged",
    "traces_flagged": "traces in which at least one detector fired",
    "findings": "detector evaluations written",
    "spans_dropped": "spans the engine queue refused (should stay 0: intake checks first)",
    "detector_errors": "detector failures (logged)",
    "pipeline_errors": "traces whose evaluation failed (logged; spans still exported)",
    "secrets_redacted": "secrets masked in stored and forwarded spans and trajectories",
    "spans_without_content": "GenAI model and tool spans that carried no content (content "
    "capture off in the instrumentation), so nothing in them could be judged",
    "log_events_matched": "GenAI events from log records read with their span",
    "log_events_unmatched": "GenAI events from log records whose span was not among the spans "
    "of their trace when it was judged (it came later, or never)",
    **DEEP_COUNTERS,  # the deep analysis tier (all 0 while it is off)
}


class Metrics:
    """Thread-safe counters; labels are folded into the key as `name{label="value"}`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()

    def add(self, name: str, value: int = 1, **labels: str) -> None:
        if value:
            with self._lock:
                self._counts[_key(name, labels)] += value

    def get(self, name: str, **labels: str) -> int:
        with self._lock:
            return self._counts[_key(name, labels)]

    def total(self, name: str) -> int:
        """Sum over every label combination of `name`."""
        with self._lock:
            return sum(v for k, v in self._counts.items() if k.partition("{")[0] == name)

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)


def _key(name: str, labels: Mapping[str, str]) -> str:
    if not labels:
        return name
    inner = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(labels.items()))
    return f"{name}{{{inner}}}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


HELP = {
    "requests": "export requests by transport and outcome",
    "spans_received": "spans in export requests, accepted or not",
    "spans_accepted": "spans handed to the pipeline",
    "spans_rejected": "spans refused, by reason",
    "spans_flagged": "annotated spans carrying an escalation level above NONE",
    "spans_forwarded": "annotated spans the next hop acknowledged",
    "spans_forward_failed": "annotated spans given up on for the next hop (after its "
    "retries, or the forward spool full)",
    "spans_forward_retried": "annotated spans the next hop refused for now, kept on disk and "
    "sent again",
    "spans_replayed": "spans of requests an earlier run acknowledged, judged again at start",
    "log_requests": "log export requests by transport and outcome",
    "log_records_received": "log records in export requests",
    "log_events_accepted": "GenAI events from log records handed to the pipeline",
    "log_events_dropped": "GenAI events the pipeline queue had no room for (records still "
    "forwarded)",
    "log_records_forwarded": "log records (received ones and findings) the next hop acknowledged",
    "log_records_forward_failed": "log records given up on for the next hop",
    "approval_requests": "requests to the /approvals endpoint, by HTTP status",
}


def render_prometheus(
    metrics: Metrics, engine_stats: Mapping[str, int], gauges: Mapping[str, tuple[float, str]]
) -> str:
    """Prometheus text exposition format 0.0.4."""
    lines: list[str] = []
    snapshot = metrics.snapshot()
    for name, about in HELP.items():
        full = f"{PREFIX}_{name}_total"
        lines += [f"# HELP {full} {about}", f"# TYPE {full} counter"]
        series = {k: v for k, v in snapshot.items() if k.partition("{")[0] == name}
        for key, value in sorted(series.items()) or [(name, 0)]:
            lines.append(f"{PREFIX}_{key.replace(name, f'{name}_total', 1)} {value}")
    for name, about in ENGINE_COUNTERS.items():
        full = f"{PREFIX}_engine_{name}_total"
        lines += [f"# HELP {full} {about}", f"# TYPE {full} counter"]
        lines.append(f"{full} {engine_stats.get(name, 0)}")
    for name, (value, about) in gauges.items():
        full = f"{PREFIX}_{name}"
        lines += [f"# HELP {full} {about}", f"# TYPE {full} gauge", f"{full} {value:g}"]
    return "\n".join(lines) + "\n"


class FlagCounter(ImmediateSink):
    """A sink that only counts: spans judged and spans flagged (escalation rank above 0)."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def write(self, evaluations: Sequence[TraceEvaluation]) -> None:
        flagged = 0
        for evaluation in evaluations:
            for span in evaluation.spans:
                rank = (span.attributes or {}).get(sc.OTEL_SAFETY_ESCALATION_RANK)
                flagged += isinstance(rank, int) and rank > 0
        self.metrics.add("spans_flagged", flagged)


class ProblemLog(RateLimitedLog):
    """One warning line per problem, but at most `per_second` lines a second.

    A hostile or broken client can send thousands of bad requests a second; the log must
    stay readable, so the excess is counted and reported in one line when the budget refills.
    """

    def __init__(self, per_second: int = 20, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(
            logger, window=1.0, limit=per_second, report_suppressed=True, clock=clock
        )
