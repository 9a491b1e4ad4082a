"""otel-safety: agent-safety detectors over OpenTelemetry GenAI spans.

`configure()` gives a TracerProvider whose spans are judged, annotated with safety
attributes and stored in DuckDB; `create_processor()` adds the same to your own provider.
"""

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
