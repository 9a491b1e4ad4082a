"""What a Cedar policy sees of a trace: its findings and claims as a request context.

Cedar has no floating-point numbers, so every 0-1 number (a score, a signal, a claim's
risk) is given as a whole percent, 0-100 (`score >= 70` means a score of 0.7 or more).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from otel_safety.deep.names import DETECTOR as DEEP_DETECTOR
from otel_safety.deep.names import DIMENSIONS
from otel_safety.model import EscalationLevel, Finding, Severity, Trajectory
from otel_safety.policies.signals import Signals, combined_signals, finding_claims, finding_signals

SEVERITY_RANK = {severity: rank for rank, severity in enumerate(Severity)}


def percent(value: float) -> int:
    """A 0-1 number as a whole percent, clamped (Cedar has only integers)."""
    return round(min(max(float(value), 0.0), 1.0) * 100)


def trace_context(findings: Sequence[Finding], base_level: EscalationLevel) -> dict[str, Any]:
    """The request context: see docs/policies.md for every field."""
    detectors: dict[str, dict[str, Any]] = {}
    for finding in findings:
        entry = detectors.setdefault(
            finding.detector,
            {
                "detected": False,
                "score": 0,
                "severity": "low",
                "count": 0,
                "detected_count": 0,
                "indicators": [],
            },
        )
        entry["count"] += 1
        entry["score"] = max(entry["score"], percent(finding.score))
        if finding.detected:
            entry["detected_count"] += 1
            if (
                not entry["detected"]
                or SEVERITY_RANK[finding.severity] > SEVERITY_RANK[Severity(entry["severity"])]
            ):
                entry["severity"] = finding.severity.value
            entry["detected"] = True
            entry["indicators"] = sorted({*entry["indicators"], *_indicator_types(finding)})
    return {
        "level": base_level.name,
        "rank": int(base_level),
        "detected": sorted({f.detector for f in findings if f.detected}),
        "severities": sorted({f.severity.value for f in findings if f.detected}),
        "detectors": detectors,
        "signals": _signals(combined_signals(findings)),
        "claims": _claims(findings),
        "findings": [_finding(f) for f in findings],
        "deep": _deep(findings),
    }


def principal_id(trajectory: Trajectory | None) -> str:
    """The agent a trace is about: its first agent name, else its service, else `unknown`."""
    if trajectory is None:
        return "unknown"
    if trajectory.agent_names:
        return trajectory.agent_names[0]
    return trajectory.service_name or "unknown"


def _deep(findings: Sequence[Finding]) -> dict[str, Any]:
    """The deep analysis of the trace, when there is one (`analysed` false, zeros, else):
    its verdict, the level it asked for, and each of its eight dimensions as a percent."""
    deep = next((f for f in findings if f.detector == DEEP_DETECTOR), None)
    details = (deep.details or {}) if deep is not None else {}
    dimensions = details.get("dimensions") if isinstance(details.get("dimensions"), dict) else {}
    level = details.get("level") if isinstance(details.get("level"), str) else "NONE"
    return {
        "analysed": deep is not None,
        "unsafe": bool(deep is not None and deep.detected),
        "risk": percent(deep.score) if deep is not None else 0,
        "level": level,
        "rank": int(EscalationLevel.parse(level)) if level in EscalationLevel.__members__ else 0,
        "dimensions": {
            name: percent(_dimension_score(dimensions.get(name))) for name in DIMENSIONS
        },
    }


def _dimension_score(entry: Any) -> float:
    score = entry.get("score") if isinstance(entry, dict) else None
    if isinstance(score, bool) or not isinstance(score, int | float):
        return 0.0
    return float(score)


def _signals(signals: Signals) -> dict[str, Any]:
    return {
        "drift": percent(signals.drift),
        "uncertainty": percent(signals.uncertainty),
        "tool_risk": percent(signals.tool_risk),
        "violation": signals.violation,
    }


def _claims(findings: Sequence[Finding]) -> dict[str, Any]:
    """Claims merged over a trace's model calls: the highest risk, any refusal."""
    risk, refused, calls = 0, False, 0
    for finding in findings:
        claims = finding_claims(finding)
        if not claims:
            continue
        calls += 1
        adversarial = claims.get("adversarial_risk")
        if isinstance(adversarial, int | float) and not isinstance(adversarial, bool):
            risk = max(risk, percent(adversarial))
        refused = refused or claims.get("refused") is True
    return {"adversarial_risk": risk, "refused": refused, "model_calls": calls}


def _finding(finding: Finding) -> dict[str, Any]:
    return {
        "detector": finding.detector,
        "detected": finding.detected,
        "score": percent(finding.score),
        "severity": finding.severity.value,
        "signals": _signals(finding_signals(finding)),
        "claims": _claims([finding]),
    }


def _indicator_types(finding: Finding) -> list[str]:
    """The types of the indicators that reached the finding's threshold (a weak one beside a
    strong one is not what fired), each also as `type:check` when it names a check
    (`ethics_boundary:privacy`)."""
    indicators = (finding.details or {}).get("indicators")
    if not isinstance(indicators, list):
        return []
    types = []
    for item in indicators:
        if not isinstance(item, dict) or not isinstance(item.get("type"), str):
            continue
        strength = item.get("severity")
        if isinstance(strength, int | float) and strength < finding.threshold:
            continue
        types.append(item["type"])
        check = (item.get("metadata") or {}).get("check")
        if isinstance(check, str):
            types.append(f"{item['type']}:{check}")
    return types
