"""An application's view of otel-safety: the engine's counters and the span batchers' drops,
exported over OTLP from otel-safety's own `MeterProvider` (`own_metrics`), never the app's.

Only when asked: `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT` set. The general
`OTEL_EXPORTER_OTLP_ENDPOINT` alone does not start it in an application (its collector may
take traces only); `serve` exports with either.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from otel_safety.exporters.span_batching import ExporterSink
from otel_safety.own_metrics import ENGINE_COUNTERS, OwnMetrics
from otel_safety.sink_base import ImmediateSink

__all__ = ["APP_COUNTERS", "app_metrics"]

PREFIX = "otel_safety"

APP_COUNTERS = {
    **ENGINE_COUNTERS,
    "spans_received": "spans the engine took from the application",
    "spans_unsampled": "spans recorded without being sampled: neither judged nor exported",
    "markers_dropped": "agent-start markers the engine queue refused",
    "log_events_dropped": "GenAI log events the engine had no room for",
}

EXPORTER_COUNTERS = {
    "exported": "annotated spans the exporters' backends took",
    "failed": "annotated spans the exporters' backends refused or failed on",
    "dropped": "annotated spans dropped from an exporter's full queue",
}


class MetricsCloser(ImmediateSink):
    """The last sink: a final export of the counts once everything else has shut down."""

    def __init__(self, own: OwnMetrics) -> None:
        self.own = own

    def write(self, evaluations: Sequence[object]) -> None:
        """Counts are read from the engine at each collection."""

    def shutdown(self) -> None:
        self.own.shutdown()


def app_metrics(
    stats: Mapping[str, int],
    sinks: Sequence[object],
    environ: Mapping[str, str] = os.environ,
) -> MetricsCloser | None:
    """Observe `stats` (the engine's) and the exporter sinks among `sinks`; a sink to append
    last to the engine's, or None when no metrics endpoint is set."""
    if not environ.get("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"):
        return None
    own = OwnMetrics(PREFIX, prometheus=False)
    for name, about in APP_COUNTERS.items():
        own.observe_counter(f"engine.{name}", about, lambda name=name: stats.get(name, 0))
    exporters = [sink for sink in sinks if isinstance(sink, ExporterSink)]
    for name, about in EXPORTER_COUNTERS.items():
        own.observe_counter(
            f"exporter.spans_{name}",
            about,
            lambda name=name: sum(getattr(sink.counts, name) for sink in exporters),
        )
    return MetricsCloser(own)
