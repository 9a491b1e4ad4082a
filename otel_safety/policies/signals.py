"""The signals contract: the one place a finding's numeric signals are read.

A finding may carry `details["signals"]`: `drift`, `uncertainty`, `tool_risk` (each 0-1) and
`violation` (bool). The tool-call guard's findings carry `details["risk"]` (0-100) instead;
it is read as `tool_risk = risk / 100` when the finding fired (a call under the detector's
threshold was judged harmless, so its risk is not a signal). Claims about a model call
(`details["claims"]`) are read here too, so policies never parse `details` themselves.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from otel_safety.model import Finding

NUMERIC = ("drift", "uncertainty", "tool_risk")


@dataclass(frozen=True)
class Signals:
    """The strongest value of each signal across some findings; absent means 0 / False."""

    drift: float = 0.0
    uncertainty: float = 0.0
    tool_risk: float = 0.0
    violation: bool = False

    @property
    def present(self) -> bool:
        return bool(self.drift or self.uncertainty or self.tool_risk or self.violation)

    def as_dict(self) -> dict[str, float | bool]:
        return {
            "drift": self.drift,
            "uncertainty": self.uncertainty,
            "tool_risk": self.tool_risk,
            "violation": self.violation,
        }


def finding_signals(finding: Finding) -> Signals:
    """One finding's signals; bad values (not numbers, out of range) are clamped or ignored."""
    details = finding.details or {}
    raw = details.get("signals")
    raw = raw if isinstance(raw, Mapping) else {}
    values = {name: _unit(raw.get(name)) for name in NUMERIC}
    risk = details.get("risk")
    guard_risk = isinstance(risk, int | float) and not isinstance(risk, bool)
    if "tool_risk" not in raw and guard_risk and finding.detected:
        values["tool_risk"] = _unit(risk / 100)
    return Signals(**values, violation=raw.get("violation") is True)


def combined_signals(findings: Iterable[Finding]) -> Signals:
    """The strictest reading across a trace: max of each number, any violation."""
    return merged_signals(finding_signals(finding) for finding in findings)


def merged_signals(readings: Iterable[Signals]) -> Signals:
    """The strictest of some signals already read: max of each number, any violation."""
    drift = uncertainty = tool_risk = 0.0
    violation = False
    for one in readings:
        drift = max(drift, one.drift)
        uncertainty = max(uncertainty, one.uncertainty)
        tool_risk = max(tool_risk, one.tool_risk)
        violation = violation or one.violation
    return Signals(drift, uncertainty, tool_risk, violation)


def finding_claims(finding: Finding) -> dict[str, Any]:
    """A finding's claims about a model call (`details["claims"]`), or an empty dict."""
    claims = (finding.details or {}).get("claims")
    return dict(claims) if isinstance(claims, Mapping) else {}


def _unit(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        return 0.0
    return min(max(float(value), 0.0), 1.0)
