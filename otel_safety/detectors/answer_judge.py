"""The shape the refusal family shares: judge a run's answer against what was asked.

`over_refusal`, `under_refusal` and `jailbreak_compliance` each weigh one signal in the
answer against one in the request. They compile the same marker data at start-up, need an
answer to judge, and quote evidence from the answer's span and the request's span.
"""

from __future__ import annotations

from typing import Any

from otel_safety.analysis.refusal.refusal import current_markers
from otel_safety.analysis.trace import TraceAnalysis
from otel_safety.detectors.base import Assessment, Detector, clip
from otel_safety.model import Evidence, Trajectory

__all__ = ["AnswerJudge"]


class AnswerJudge(Detector):
    """Base class: subclasses implement `weigh(trajectory, request, answer)`."""

    def __init__(self, threshold: float | None = None) -> None:
        super().__init__(threshold)
        current_markers()  # compile once at start-up; a broken user data file fails here

    def judge(self, trajectory: Trajectory, analysis: TraceAnalysis) -> list[Assessment]:
        if trajectory.final_output is None:
            return []  # no answer, nothing to judge
        return [self.weigh(trajectory, analysis.user_messages, trajectory.final_output)]

    def weigh(self, trajectory: Trajectory, request: str, answer: str) -> Assessment:
        raise NotImplementedError

    @staticmethod
    def answer_evidence(trajectory: Trajectory, text: str, **detail: Any) -> Evidence:
        return Evidence(text=clip(text), span_id=trajectory.final_output_span_id, detail=detail)

    @staticmethod
    def request_evidence(trajectory: Trajectory, text: str, **detail: Any) -> Evidence:
        return Evidence(text=clip(text), span_id=trajectory.scope.span_id, detail=detail)
