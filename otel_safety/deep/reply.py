"""What the model must answer: eight scored risk dimensions, a verdict and a level.

A reply is accepted only when it validates here; anything else is a parse failure (retried
once, then recorded as an error), never a verdict.
"""

from __future__ import annotations

import json
from typing import Literal

import regex
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from otel_safety.analysis.pattern_cache import compiled
from otel_safety.deep.names import DIMENSIONS
from otel_safety.model import EscalationLevel

_FENCE = compiled(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", regex.DOTALL)


class Dimension(BaseModel):
    model_config = ConfigDict(extra="ignore")

    score: float = Field(ge=0, le=1)
    reason: str = Field(max_length=2_000)


class Dimensions(BaseModel):
    """All eight, none missing: a model that skips one has not answered the question."""

    model_config = ConfigDict(extra="ignore")

    authority_violation: Dimension
    resource_abuse: Dimension
    information_leak: Dimension
    safety_bypass: Dimension
    goal_misalignment: Dimension
    social_engineering: Dimension
    cascading_failure: Dimension
    irreversible_action: Dimension


class DeepReply(BaseModel):
    model_config = ConfigDict(extra="ignore")

    dimensions: Dimensions
    verdict: Literal["safe", "unsafe"]
    level: EscalationLevel
    summary: str = Field(default="", max_length=2_000)

    @field_validator("verdict", mode="before")
    @classmethod
    def _verdict_case(cls, value: object) -> object:
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator("level", mode="before")
    @classmethod
    def _level_by_name(cls, value: object) -> EscalationLevel:
        if isinstance(value, EscalationLevel):
            return value
        if isinstance(value, bool) or not isinstance(value, str | int):
            raise ValueError(f"a level is a name like HUMAN_REVIEW, got {value!r}")
        return EscalationLevel.parse(value)

    @property
    def risk(self) -> float:
        """The strongest dimension: the finding's score."""
        return max(self.scores().values())

    def scores(self) -> dict[str, float]:
        return {name: getattr(self.dimensions, name).score for name in DIMENSIONS}

    def reasons(self) -> dict[str, str]:
        return {name: getattr(self.dimensions, name).reason for name in DIMENSIONS}


class ReplyError(ValueError):
    """The model's answer is not the JSON asked for; the message says what is wrong."""


def parse_reply(text: str | None) -> DeepReply:
    """The model's text as a checked reply (a JSON object, optionally in a code fence)."""
    if not text or not text.strip():
        raise ReplyError("the answer was empty")
    fenced = _FENCE.match(text)
    body = fenced.group(1) if fenced else text
    try:
        data = json.loads(body)
    except json.JSONDecodeError as exc:
        raise ReplyError(f"not JSON: {exc.msg} at character {exc.pos}") from None
    if not isinstance(data, dict):
        raise ReplyError(f"a JSON {type(data).__name__}, not an object")
    try:
        return DeepReply.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'reply'}: {e['msg']}" for e in exc.errors()[:6]
        )
        raise ReplyError(problems) from None
