"""The shared analysis layer: what detectors read of a text, worked out once per trace.

Detectors ask the same questions of the same texts (the answer's sentences, its refusal
reading, its word stems), and chat spans repeat the whole history in every call. Pure text
functions marked `per_trace` compute each answer once per trace, keyed by content; the
pipeline opens the scope around a trace's detectors.
"""

from otel_safety.analysis.memo import per_trace, trace_scope

__all__ = ["per_trace", "trace_scope"]
