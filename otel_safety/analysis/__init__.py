"""The shared analysis layer: what detectors read of a text, worked out once.

Detectors ask the same questions of the same texts (the answer's sentences, its refusal
reading, its word stems), chat spans repeat the whole history in every call, and traces
repeat system prompts and earlier turns. Pure text functions marked `content_memo` compute
each answer once while a bounded memo keyed by content holds it; the pipeline opens the
scope around a trace's detectors.
"""

from otel_safety.analysis.memo import content_memo, trace_scope

__all__ = ["content_memo", "trace_scope"]
