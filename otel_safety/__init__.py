"""otel-safety: agent-safety detectors over OpenTelemetry GenAI spans.

`configure()` gives a TracerProvider whose spans are judged, annotated with safety
attributes and stored in DuckDB; `create_processor()` adds the same to your own provider.
The names below are imported on first use (`lazy_exports`): importing one module of the
package does not load the rest, and an app that judges in a worker process never loads the
detectors.
"""

from typing import TYPE_CHECKING

from otel_safety.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from otel_safety.bootstrap import configure, create_processor
    from otel_safety.engine import ExporterSink, SafetyEngine
    from otel_safety.exporters.duckdb import DuckDBStore
    from otel_safety.model import EscalationLevel, Finding, Severity, Trajectory
    from otel_safety.pipeline import Pipeline, TraceEvaluation
    from otel_safety.processor import SafetySpanProcessor

__version__ = "0.1.0"

__all__ = [
    "DuckDBStore",
    "EscalationLevel",
    "ExporterSink",
    "Finding",
    "Pipeline",
    "SafetyEngine",
    "SafetySpanProcessor",
    "Severity",
    "TraceEvaluation",
    "Trajectory",
    "configure",
    "create_processor",
]

__getattr__, __dir__ = lazy_exports(
    globals(),
    {
        "configure": "otel_safety.bootstrap",
        "create_processor": "otel_safety.bootstrap",
        "ExporterSink": "otel_safety.engine",
        "SafetyEngine": "otel_safety.engine",
        "DuckDBStore": "otel_safety.exporters.duckdb",
        **dict.fromkeys(
            ("EscalationLevel", "Finding", "Severity", "Trajectory"), "otel_safety.model"
        ),
        "Pipeline": "otel_safety.pipeline",
        "TraceEvaluation": "otel_safety.pipeline",
        "SafetySpanProcessor": "otel_safety.processor",
    },
)
