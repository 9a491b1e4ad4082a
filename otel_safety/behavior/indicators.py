"""Typed indicators: each behaviour monitor says what kind of thing it saw, how strongly, and
quotes it, so a finding explains itself and SQL can group by indicator type."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from otel_safety.model import Evidence

__all__ = ["Indicator", "IndicatorType"]


class IndicatorType(StrEnum):
    CAPABILITY_DROP = "capability_drop"
    STRATEGIC_TIMING = "strategic_timing"
    SELECTIVE_ENGAGEMENT = "selective_engagement"
    FACTUAL_INCONSISTENCY = "factual_inconsistency"
    LOGICAL_FALLACY = "logical_fallacy"
    EMOTIONAL_MANIPULATION = "emotional_manipulation"
    CITATION_FABRICATION = "citation_fabrication"
    BEHAVIORAL_DRIFT = "behavioral_drift"
    ETHICS_BOUNDARY = "ethics_boundary"


class Indicator(BaseModel):
    """One thing a monitor saw in one agent turn: its type, strength 0-1 and the quotes."""

    model_config = ConfigDict(extra="forbid")

    type: IndicatorType
    severity: float = Field(ge=0.0, le=1.0)
    evidence: list[str] = Field(default_factory=list)
    agent: str | None = None
    span_id: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)

    def as_evidence(self) -> Evidence:
        text = "; ".join(self.evidence) or self.type.value
        detail = {"indicator": self.type.value, "severity": round(self.severity, 4)}
        if self.agent:
            detail["agent"] = self.agent
        return Evidence(text=text, span_id=self.span_id, detail={**detail, **self.metadata})

    def as_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_none=True)
