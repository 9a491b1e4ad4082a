"""Shared fixtures: real SDK spans from a real TracerProvider, captured in memory."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from needs import require
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_safety.analysis.trace import TraceAnalysis
from otel_safety.detectors.base import Assessment, Detector
from otel_safety.model import Evidence, Severity, Trajectory

pytest_plugins = ["kinds", "pytester"]  # test-kind markers; pytester for their test

# Compiled patterns are kept between the test processes, not in the user's cache folder.
os.environ.setdefault(
    "OTEL_SAFETY_PATTERN_CACHE",
    str(Path(tempfile.gettempdir()) / f"otel-safety-test-patterns-{os.getuid()}"),
)


class KeywordDetector(Detector):
    """A tiny test detector: fires when the final answer contains a keyword."""

    key = "keyword"
    severity = Severity.HIGH
    default_threshold = 0.5

    def __init__(self, threshold: float | None = None, keyword: str = "BAD") -> None:
        super().__init__(threshold)
        self.keyword = keyword

    def judge(self, trajectory: Trajectory, analysis: TraceAnalysis) -> list[Assessment]:
        if trajectory.final_output is None:
            return []
        hit = self.keyword in trajectory.final_output
        evidence = [Evidence(text=trajectory.final_output, span_id=trajectory.final_output_span_id)]
        return [
            Assessment(1.0 if hit else 0.0, evidence if hit else [], "keyword seen" if hit else "")
        ]


class SpanFactory:
    """Makes finished GenAI spans with a real SDK tracer."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider(resource=Resource.create({"service.name": "unit"}))
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.tracer = self.provider.get_tracer("tests")

    def agent_run(
        self, answer: str = "fine", prompt: str = "Summarize the README"
    ) -> list[ReadableSpan]:
        """One agent run: root agent span, one chat span with the answer."""
        self.exporter.clear()
        with (
            self.tracer.start_as_current_span(
                "invoke_agent helper",
                attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "helper"},
            ),
            self.tracer.start_as_current_span(
                "chat model",
                attributes={
                    "gen_ai.operation.name": "chat",
                    "gen_ai.input.messages": json.dumps(
                        [{"role": "user", "parts": [{"type": "text", "content": prompt}]}]
                    ),
                    "gen_ai.output.messages": json.dumps(
                        [{"role": "assistant", "parts": [{"type": "text", "content": answer}]}]
                    ),
                },
            ),
        ):
            pass
        return list(self.exporter.get_finished_spans())

    def plain(self, name: str = "GET /health") -> list[ReadableSpan]:
        self.exporter.clear()
        with self.tracer.start_as_current_span(name, attributes={"http.route": "/health"}):
            pass
        return list(self.exporter.get_finished_spans())


@pytest.fixture
def span_factory() -> Iterator[SpanFactory]:
    factory = SpanFactory()
    yield factory
    factory.provider.shutdown()


SHARED_DATA = Path(
    os.environ.get("OTEL_SAFETY_EVAL_DATA")
    or Path(__file__).resolve().parents[1].parent / "shared" / "data"
)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The external labelled data beside the checkout (or at $OTEL_SAFETY_EVAL_DATA).

    CI must have it and fails loudly without it; a developer's machine may skip.
    """
    require(
        SHARED_DATA.is_dir(),
        f"the labelled data at {SHARED_DATA} (set OTEL_SAFETY_EVAL_DATA to where it is)",
    )
    return SHARED_DATA
