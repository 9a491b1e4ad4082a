"""Findings -> escalation level: a small, documented table users can override."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from otel_safety.model import EscalationLevel, Finding, Severity, Trajectory

DEFAULT_SEVERITY_LEVELS: dict[Severity, EscalationLevel] = {
    Severity.LOW: EscalationLevel.CLARIFY,
    Severity.MEDIUM: EscalationLevel.WARN,
    Severity.HIGH: EscalationLevel.HUMAN_REVIEW,
    Severity.CRITICAL: EscalationLevel.HARD_STOP,
}


class Policy(Protocol):
    """Anything that sets each finding's level and returns the trace's level."""

    def decide(
        self, findings: Sequence[Finding], trajectory: Trajectory | None
    ) -> EscalationLevel: ...


class SeverityPolicy:
    """A fired finding escalates to its severity's level; detectors can be given their own.

    `detector_levels={"over_refusal": "WARN"}` pins one detector's level whatever its
    severity. Findings that did not fire stay at NONE. The trace's level is the strictest.
    """

    def __init__(
        self,
        severity_levels: Mapping[Severity | str, EscalationLevel | str] | None = None,
        detector_levels: Mapping[str, EscalationLevel | str] | None = None,
    ) -> None:
        self.severity_levels = dict(DEFAULT_SEVERITY_LEVELS)
        for severity, level in (severity_levels or {}).items():
            self.severity_levels[Severity(severity)] = EscalationLevel.parse(level)
        self.detector_levels = {
            key: EscalationLevel.parse(level) for key, level in (detector_levels or {}).items()
        }
        _check_keys(self.detector_levels)

    def level_for(self, finding: Finding) -> EscalationLevel:
        if not finding.detected:
            return EscalationLevel.NONE
        if finding.detector in self.detector_levels:
            return self.detector_levels[finding.detector]
        return self.severity_levels[finding.severity]

    def decide(
        self, findings: Sequence[Finding], trajectory: Trajectory | None = None
    ) -> EscalationLevel:
        for finding in findings:
            finding.escalation = self.level_for(finding)
        return max((f.escalation for f in findings), default=EscalationLevel.NONE)


def _check_keys(levels: Mapping[str, EscalationLevel]) -> None:
    """A misspelt key ("injecton") would pin nothing, unsaid."""
    if not levels:
        return
    from otel_safety.detectors import known

    unknown = sorted(set(levels) - set(known()))
    if unknown:
        raise ValueError(
            f"detector_levels names no detector: {', '.join(unknown)} (registered: "
            f"{', '.join(known())}; a detector of your own is registered by importing its "
            "module first)"
        )


def raised_by_policy(findings: Sequence[Finding], level: EscalationLevel) -> bool:
    """Whether the trace's level is above every finding's own: the policy, not a finding,
    explains it (a Cedar rule, signals combined across findings)."""
    return level > max((f.escalation for f in findings), default=EscalationLevel.NONE)
