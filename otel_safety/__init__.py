"""otel-safety: agent-safety detectors over OpenTelemetry GenAI spans."""

__version__ = "0.1.0"
