"""Building a pipeline: the detectors it runs, given as objects or by key."""

from __future__ import annotations

import pytest

from otel_safety.pipeline import Pipeline

pytestmark = pytest.mark.unit


def test_detectors_may_be_given_by_key_and_anything_else_is_named() -> None:
    assert [d.key for d in Pipeline(detectors=["deception"]).detectors] == ["deception"]
    with pytest.raises(ValueError, match="unknown detector"):
        Pipeline(detectors=["no_such_detector"])
    with pytest.raises(TypeError, match="Detector objects or detector keys"):
        Pipeline(detectors=[object()])  # type: ignore[list-item]
