"""The safeguards table over findings' signals, combined with the detectors' severities.

| condition                               | level        |
|-----------------------------------------|--------------|
| any violation                           | HARD_STOP    |
| drift >= 0.8                            | HARD_STOP    |
| drift >= 0.6 and uncertainty >= 0.4     | HUMAN_REVIEW |
| drift >= 0.5 or tool risk >= 0.7        | SOFT_STOP    |
| uncertainty >= 0.4                      | CLARIFY      |
| drift >= 0.3                            | WARN         |

The first row that matches gives the table's level; the finding's (or trace's) level is the
stricter of that and what `SeverityPolicy` gives the detector's severity. With no signals on
any finding the levels are exactly `SeverityPolicy`'s.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from otel_safety.conversation import ExpiringStore
from otel_safety.model import EscalationLevel, Finding, Severity, Trajectory
from otel_safety.policies.signals import Signals, finding_signals, merged_signals
from otel_safety.policy import SeverityPolicy


@dataclass(frozen=True)
class Thresholds:
    """The table's cut-offs, so the adaptive policy can scale them."""

    drift_stop: float = 0.8
    drift_review: float = 0.6
    uncertainty_review: float = 0.4
    drift_soft: float = 0.5
    tool_risk_soft: float = 0.7
    uncertainty_clarify: float = 0.4
    drift_warn: float = 0.3

    def scaled(self, factor: float) -> Thresholds:
        """Every cut-off times `factor`, capped at 1 (a cut-off of 1 still fires at 1)."""
        values = {name: min(1.0, value * factor) for name, value in vars(self).items()}
        return replace(self, **values)


def table_level(signals: Signals, t: Thresholds = Thresholds()) -> EscalationLevel:
    """The first matching row of the safeguards table, NONE when none does."""
    if signals.violation or signals.drift >= t.drift_stop:
        return EscalationLevel.HARD_STOP
    if signals.drift >= t.drift_review and signals.uncertainty >= t.uncertainty_review:
        return EscalationLevel.HUMAN_REVIEW
    if signals.drift >= t.drift_soft or signals.tool_risk >= t.tool_risk_soft:
        return EscalationLevel.SOFT_STOP
    if signals.uncertainty >= t.uncertainty_clarify:
        return EscalationLevel.CLARIFY
    if signals.drift >= t.drift_warn:
        return EscalationLevel.WARN
    return EscalationLevel.NONE


class SafeguardsPolicy:
    """The default policy: the safeguards table over signals, max'd with severity levels.

    Each finding gets the stricter of its severity level and the table on its own signals;
    the trace gets the strictest finding, or the table on the trace's combined signals (max
    of each signal across findings) when that is stricter, since drift seen by one monitor
    and uncertainty seen by another together call for review.
    """

    def __init__(
        self,
        severity_levels: Mapping[Severity | str, EscalationLevel | str] | None = None,
        detector_levels: Mapping[str, EscalationLevel | str] | None = None,
        thresholds: Thresholds | None = None,
    ) -> None:
        self.severity = SeverityPolicy(severity_levels, detector_levels)
        self.thresholds = thresholds or Thresholds()

    def thresholds_for(self, trajectory: Trajectory | None) -> Thresholds:
        return self.thresholds

    def decide(
        self, findings: Sequence[Finding], trajectory: Trajectory | None = None
    ) -> EscalationLevel:
        t = self.thresholds_for(trajectory)
        self.severity.decide(findings, trajectory)
        readings = [finding_signals(finding) for finding in findings]  # each read once
        for finding, signals in zip(findings, readings, strict=True):
            finding.escalation = max(finding.escalation, table_level(signals, t))
        worst = max((f.escalation for f in findings), default=EscalationLevel.NONE)
        return max(worst, table_level(merged_signals(readings), t))


class AdaptivePolicy(SafeguardsPolicy):
    """The safeguards table with its cut-offs scaled to the context and the conversation.

    Every drift, uncertainty and tool-risk cut-off `t` becomes `min(1, t * factor)` with

        factor = (1.5 - sensitivity) / (risk_multiplier * (1 + history_weight * n))

    where `sensitivity` is 0-1 (0.5 leaves the table as it is, 1 halves every cut-off,
    0 raises them by half), `risk_multiplier` > 0 is the context's risk (2 halves the
    cut-offs: a payments agent; 0.5 doubles them: a sandbox), and `n` is the number of
    earlier traces of the same conversation (`gen_ai.conversation.id`) that reached WARN or
    above, capped at `history_cap`. A violation is a HARD_STOP whatever the factor. The
    history is kept for the last `max_conversations` conversations, an hour after last use.
    """

    def __init__(
        self,
        sensitivity: float = 0.5,
        risk_multiplier: float = 1.0,
        *,
        history_weight: float = 0.1,
        history_cap: int = 5,
        max_conversations: int = 10_000,
        severity_levels: Mapping[Severity | str, EscalationLevel | str] | None = None,
        detector_levels: Mapping[str, EscalationLevel | str] | None = None,
        thresholds: Thresholds | None = None,
    ) -> None:
        for name, value in (("sensitivity", sensitivity), ("risk_multiplier", risk_multiplier)):
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"{name} must be a number, got {value!r}")
        if not 0 <= sensitivity <= 1:
            raise ValueError(f"sensitivity must be between 0 and 1, got {sensitivity!r}")
        if risk_multiplier <= 0:
            raise ValueError(f"risk_multiplier must be above 0, got {risk_multiplier!r}")
        if history_weight < 0 or history_cap < 0 or max_conversations < 1:
            raise ValueError("history_weight and history_cap must be >= 0, max_conversations >= 1")
        super().__init__(severity_levels, detector_levels, thresholds)
        self.sensitivity = sensitivity
        self.risk_multiplier = risk_multiplier
        self.history_weight = history_weight
        self.history_cap = history_cap
        self.max_conversations = max_conversations
        # conversation -> [escalated traces so far]; bounded and expiring like monitor state
        self._history: ExpiringStore[list[int]] = ExpiringStore(max_entries=max_conversations)

    def escalations(self, conversation: str | None) -> int:
        """Earlier traces of this conversation that reached WARN or above (capped)."""
        if conversation is None:
            return 0
        counted = self._history.peek(conversation)
        return min(counted[0], self.history_cap) if counted else 0

    def factor(self, escalations: int = 0) -> float:
        history = 1 + self.history_weight * min(escalations, self.history_cap)
        return (1.5 - self.sensitivity) / (self.risk_multiplier * history)

    def thresholds_for(self, trajectory: Trajectory | None) -> Thresholds:
        conversation = trajectory.conversation_id if trajectory else None
        return self.thresholds.scaled(self.factor(self.escalations(conversation)))

    def decide(
        self, findings: Sequence[Finding], trajectory: Trajectory | None = None
    ) -> EscalationLevel:
        level = super().decide(findings, trajectory)
        conversation = trajectory.conversation_id if trajectory else None
        if conversation is not None and level >= EscalationLevel.WARN:
            with self._history.lock:
                self._history.get(conversation, lambda: [0])[0] += 1
        return level
