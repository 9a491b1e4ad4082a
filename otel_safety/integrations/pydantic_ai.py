"""pydantic-ai: send an agent's spans to a given TracerProvider, across pydantic-ai versions."""

from __future__ import annotations

from typing import Any

from opentelemetry.trace import TracerProvider


def instrumentation(tracer_provider: TracerProvider) -> dict[str, Any]:
    """Keyword arguments for `pydantic_ai.Agent(...)` that instrument it with GenAI spans.

    pydantic-ai 2 takes an `Instrumentation` capability; 1.x took `instrument=`.
    """
    try:
        from pydantic_ai.models.instrumented import InstrumentationSettings
    except ImportError as exc:  # pragma: no cover - depends on the extra
        raise ImportError("pydantic-ai is not installed: pip install 'otel-safety[demo]'") from exc
    settings = InstrumentationSettings(tracer_provider=tracer_provider)
    try:
        from pydantic_ai.capabilities import Instrumentation
    except ImportError:
        return {"instrument": settings}
    return {"capabilities": [Instrumentation(settings)]}
