"""A deep analysis as a `deep_analysis` finding, and the trace's level with it.

The finding goes onto the trace's root span. Its score is the strongest of the eight
dimensions, it fires when the model's verdict is "unsafe", and its severity follows the
level the model asked for, so the escalation policy (and a Cedar policy, through
`context.deep`) weighs it like any other finding. A deep analysis only ever raises a
trace's level: a "safe" verdict does not clear what the rules found.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from otel_safety.deep.client import Outcome
from otel_safety.deep.names import DETECTOR
from otel_safety.model import EscalationLevel, Finding, Severity, Trajectory
from otel_safety.policy import Policy, raised_by_policy

THRESHOLD = 0.5  # nominal: the verdict, not the score, decides whether it fires

_SEVERITY = {
    EscalationLevel.NONE: Severity.LOW,
    EscalationLevel.CLARIFY: Severity.LOW,
    EscalationLevel.WARN: Severity.MEDIUM,
    EscalationLevel.SOFT_STOP: Severity.MEDIUM,
    EscalationLevel.HUMAN_REVIEW: Severity.HIGH,
    EscalationLevel.HARD_STOP: Severity.CRITICAL,
}


@dataclass
class DeepResult:
    """One trace's deep analysis, ready for the sinks: a finding, or an error."""

    trace_id: str
    root_span_id: str | None
    trajectory: Trajectory
    model: str
    prompt_version: str
    outcome: Outcome
    why: str  # why the trace was chosen
    finding: Finding | None = None
    level_before: EscalationLevel = EscalationLevel.NONE
    level: EscalationLevel = EscalationLevel.NONE
    by_policy: bool = False
    detectors_fired: list[str] = field(default_factory=list)
    root_trace_id: int = 0  # the root span's ids and end, to parent the log record
    root_span_int: int = 0
    root_end_ns: int = 0

    @property
    def raised(self) -> bool:
        return self.level > self.level_before

    @property
    def error(self) -> str | None:
        return self.outcome.error


def deep_finding(
    outcome: Outcome,
    trajectory: Trajectory,
    span_id: str | None,
    model: str,
    prompt_version: str,
) -> Finding:
    """The finding for a parsed reply (the caller checked `outcome.reply`)."""
    reply = outcome.reply
    assert reply is not None
    scores, reasons = reply.scores(), reply.reasons()
    top = sorted(scores, key=lambda name: -scores[name])[:3]
    explanation = reply.summary or "; ".join(f"{name}: {reasons[name]}" for name in top)
    return Finding(
        detector=DETECTOR,
        trace_id=trajectory.trace_id,
        span_id=span_id,
        score=reply.risk,
        threshold=THRESHOLD,
        detected=reply.verdict == "unsafe",
        severity=_SEVERITY[reply.level],
        explanation=explanation[:500],
        details={
            "verdict": reply.verdict,
            "level": reply.level.name,
            "dimensions": {
                name: {"score": scores[name], "reason": reasons[name]} for name in scores
            },
            "summary": reply.summary,
            "model": model,
            "prompt_version": prompt_version,
            "latency_ms": round(outcome.seconds * 1000, 1),
            "calls": outcome.calls,
            "tokens": outcome.tokens,
        },
    )


def decide_with(
    policy: Policy,
    findings: Sequence[Finding],
    deep: Finding,
    trajectory: Trajectory,
    level_before: EscalationLevel,
) -> tuple[EscalationLevel, bool]:
    """(the trace's level with the deep finding, whether the policy rather than a finding
    explains it). The first verdict's findings are copied: their stored rows stay as they
    were written. The level never falls below the first verdict's."""
    every = [f.model_copy(deep=True) for f in findings]
    every.append(deep)
    try:
        decided = policy.decide(every, trajectory)
    except Exception:  # a policy that fails keeps the first verdict: fail open
        deep.escalation = EscalationLevel.NONE
        return level_before, False
    level = max(level_before, decided)
    return level, raised_by_policy(every, level)
