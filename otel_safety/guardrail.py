"""Escalation levels and guard verdicts as OpenTelemetry GenAI guardrail attributes.

The names and the level table come from the generated `otel_safety.semconv`, so a rename in
the upstream proposal is a change to the registry YAML, not to this module.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from otel_safety import semconv as sc
from otel_safety.model import EscalationLevel, Finding

if TYPE_CHECKING:
    from otel_safety.guard.verdict import Verdict

TOOL_GUARD = "tool_guard"  # the guard's policy id, and the key of the detector replaying it
TOOL_GUARD_COMPONENT = "otel_safety.tool_guard"
TOOL_GUARD_RISK_CATEGORY = "excessive_agency"


def verdict_type(level: EscalationLevel) -> str:
    """The `gen_ai.guardrail.verdict.type` the level table gives this level."""
    return sc.GUARDRAIL_VERDICT_BY_LEVEL[level.name]


def action_type(level: EscalationLevel) -> str:
    """The `gen_ai.guardrail.action.type` a caller enforcing this level takes."""
    return sc.GUARDRAIL_ACTION_BY_LEVEL[level.name]


def decision_level(decision: str) -> EscalationLevel:
    """The escalation level a guard decision (ALLOW, WARN, BLOCK) stands for."""
    return EscalationLevel.parse(sc.GUARD_DECISION_LEVELS[decision])


def strongest(findings: Sequence[Finding]) -> Finding | None:
    """The fired finding with the highest level (then score): the one a verdict is about."""
    fired = [f for f in findings if f.detected]
    return max(fired, key=lambda f: (f.escalation, f.score), default=None)


def level_attributes(level: EscalationLevel, findings: Sequence[Finding]) -> dict[str, Any]:
    """The verdict for `level`, with the risk of the strongest fired finding among `findings`."""
    attributes: dict[str, Any] = {sc.GEN_AI_GUARDRAIL_VERDICT_TYPE: verdict_type(level)}
    top = strongest(findings)
    if top is not None:
        attributes.update(_risk(top.detector, top.score, top.risk_category))
    return attributes


def finding_attributes(finding: Finding) -> dict[str, Any]:
    """The guardrail attributes of one finding's evaluation event."""
    return {
        sc.GEN_AI_GUARDRAIL_VERDICT_TYPE: verdict_type(finding.escalation),
        **_risk(finding.detector, finding.score, finding.risk_category),
    }


def guard_attributes(verdict: Verdict) -> dict[str, Any]:
    """The `run_guardrail` event of one inline guard decision.

    The verdict is what the guard judged (an approver is only asked about WARN calls); the
    action is what was enforced, after the approver's answer when there was one.
    """
    judged = "WARN" if verdict.approval is not None else verdict.decision.value
    enforced = verdict.decision.value
    attributes: dict[str, Any] = {
        sc.GEN_AI_GUARDRAIL_COMPONENT_NAME: TOOL_GUARD_COMPONENT,
        sc.GEN_AI_GUARDRAIL_TARGET_TYPE: "input",
        sc.GEN_AI_GUARDRAIL_TARGET_SUBTYPE: "tool_call",
        sc.GEN_AI_GUARDRAIL_VERDICT_TYPE: verdict_type(decision_level(judged)),
        sc.GEN_AI_GUARDRAIL_ACTION_TYPE: action_type(decision_level(enforced)),
    }
    flagged = judged != "ALLOW"
    attributes.update(
        _risk(TOOL_GUARD, verdict.risk / 100, TOOL_GUARD_RISK_CATEGORY if flagged else None)
    )
    if verdict.reasons:
        attributes[sc.GEN_AI_GUARDRAIL_VERDICT_REASON] = verdict.reasons[0]
    return attributes


def _risk(policy: str, score: float, category: str | None) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        sc.GEN_AI_GUARDRAIL_SECURITY_POLICY_ID: policy,
        sc.GEN_AI_GUARDRAIL_SECURITY_RISK_SCORE: float(score),
    }
    if category:
        attributes[sc.GEN_AI_GUARDRAIL_SECURITY_RISK_CATEGORY] = category
    return attributes
