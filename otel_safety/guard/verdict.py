"""What the guard says about one tool call: a decision, a risk score and the reasons."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class Decision(StrEnum):
    ALLOW = "ALLOW"
    WARN = "WARN"
    BLOCK = "BLOCK"


class RuleHit(BaseModel):
    """One rule that matched, with the text that made it match (secrets masked)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rule_id: str
    threat: str
    risk: int
    matched: str = ""
    reason: str = ""


class Verdict(BaseModel):
    """The guard's answer for one call; recorded in the audit log and on the trace."""

    model_config = ConfigDict(extra="forbid")

    decision: Decision
    risk: int = Field(ge=0, le=100)
    tool: str
    category: str
    categories: list[str] = Field(default_factory=list)
    requester: str | None = None
    requester_role: str | None = None
    trust: int | None = None
    verified: bool | None = None
    hits: list[RuleHit] = Field(default_factory=list)
    rule_ids: list[str] = Field(default_factory=list, description="matched rules, strongest first")
    reasons: list[str] = Field(default_factory=list)
    approval: str | None = Field(
        default=None, description="approved | denied | expired, when an approver was asked"
    )
    approval_id: str | None = Field(
        default=None, description="the stored approval request answered (safety-N)"
    )
    approval_by: str | None = Field(
        default=None, description="who answered it (the approver callable, or --by / the user)"
    )
    source: str = Field(default="inline", description="inline (before the call) or trace")
    deep: dict[str, Any] | None = Field(
        default=None,
        description="the deep analysis asked for with check_tool_call(deep=True): its verdict, "
        "level, dimensions, model and prompt version, or the error that stopped it",
    )

    @property
    def blocked(self) -> bool:
        return self.decision is Decision.BLOCK

    def summary(self) -> str:
        """One line for logs, tool results and span events."""
        why = "; ".join(self.reasons[:3]) or "no rule matched"
        return f"{self.decision.value} {self.tool} ({self.category}, risk {self.risk}): {why}"

    def record(self) -> dict[str, Any]:
        """A JSON-able dict (audit rows, span attributes)."""
        return self.model_dump(mode="json", exclude={"hits"})
