"""Building a pipeline: the detectors it runs, given as objects or by key."""

from __future__ import annotations

import logging

import pytest

from otel_safety import semconv as sc
from otel_safety.detectors import Detector
from otel_safety.model import EscalationLevel
from otel_safety.pipeline import Pipeline

pytestmark = pytest.mark.unit


def test_detectors_may_be_given_by_key_and_anything_else_is_named() -> None:
    assert [d.key for d in Pipeline(detectors=["deception"]).detectors] == ["deception"]
    with pytest.raises(ValueError, match="unknown detector"):
        Pipeline(detectors=["no_such_detector"])
    with pytest.raises(TypeError, match="Detector objects or detector keys"):
        Pipeline(detectors=[object()])  # type: ignore[list-item]


class Broken(Detector):
    key = "broken_rule"
    default_threshold = 0.5

    def judge(self, trajectory, analysis):
        raise RuntimeError("cannot read this")


def test_a_trace_a_detector_failed_on_goes_to_review_and_says_which(span_factory, caplog):
    pipeline = Pipeline(detectors=[Broken(), Broken()])
    with caplog.at_level(logging.ERROR, logger="otel_safety.pipeline"):
        evaluations = [pipeline.evaluate(span_factory.agent_run()) for _ in range(4)]
    for evaluation in evaluations:
        assert evaluation.level == EscalationLevel.HUMAN_REVIEW
        assert (
            evaluation.detector_errors
            == ["detector broken_rule failed: RuntimeError: cannot read this"] * 2
        )
        [root] = [s for s in evaluation.spans if s.parent is None]
        root_notes = root.attributes[sc.OTEL_SAFETY_NOTES]
        assert "detector broken_rule failed: RuntimeError: cannot read this" in root_notes
    tracebacks = [r for r in caplog.records if r.exc_info]
    assert len(tracebacks) == 5  # eight failures, at most five tracebacks a minute
    assert Pipeline(detectors=[]).evaluate(span_factory.agent_run()).level == EscalationLevel.NONE
