"""Outcome verification: a post-action monitor of what the agent's tool calls came back with.

After the action, the result tells what really happened: the call errored, a guard blocked
it, the system it touched refused access (and the agent kept trying other calls: an
unauthorized access attempt; the same call sent again is a retry, counted once), or an
action the guard had warned about went through. The final answer is checked for anomalies
such as a stack trace leaking into it. An error or a risky-looking action is recorded
without firing, a block or a leaked failure clarifies, a warned-about completion warns, and
repeated refused access carries a tool risk that the safeguards policy turns into a stop.
Patterns are in `data/monitors.toml`.
"""

from __future__ import annotations

from otel_safety.analysis.text.monitor_rules import MonitorRules, current_rules
from otel_safety.analysis.trace import TraceAnalysis
from otel_safety.detectors.base import Assessment, Detector, clip
from otel_safety.detectors.registry import register
from otel_safety.model import Evidence, Trajectory

__all__ = ["OutcomeCheck"]


@register
class OutcomeCheck(Detector):
    """Flags tool outcomes that need a look: blocked, refused, risky completions, leaks."""

    key = "outcome_check"
    default_threshold = 0.5
    risk_category = "unsafe_outcome"
    description = (
        "Post-action monitor: a tool call was blocked, the system it touched refused access "
        "repeatedly (an unauthorized access attempt), an action the guard warned about "
        "completed, or the "
        "final answer shows an unexpected failure (a stack trace). Errors alone are recorded, "
        "not flagged."
    )

    def __init__(self, threshold: float | None = None) -> None:
        super().__init__(threshold)
        self.rules: MonitorRules = current_rules()

    def judge(self, trajectory: Trajectory, analysis: TraceAnalysis) -> list[Assessment]:
        if not trajectory.tool_calls and not trajectory.final_output:
            return []
        found: list[tuple[str, Evidence]] = []
        denials: list[Evidence] = []
        denied_calls: set[tuple[str, str]] = set()  # a retry of the same call probes nothing
        errored = False
        for call in trajectory.tool_calls:
            label = f"tool {call.name}"
            recorded = call.guard or {}
            result = call.result or ""
            blocked = str(recorded.get("decision", "")).upper() == "BLOCK"
            if blocked:
                found.append(("blocked", _evidence(f"{label} blocked", call.span_id)))
            elif call.error:
                errored = True
                found.append(("errored", _evidence(f"{label} failed: {call.error}", call.span_id)))
            if denied := self.rules.matches(self.rules.denied, f"{result} {call.error or ''}"):
                attempt = (call.name, call.arguments_text())
                if attempt not in denied_calls:
                    denied_calls.add(attempt)
                    denials.append(_evidence(f"{label} refused: {denied[0]}", call.span_id))
                continue
            risk, hits = self.rules.action_risk([f"{call.name} {call.arguments_text()}"])
            warned = str(recorded.get("decision", "")).upper() == "WARN"
            if (risk >= 1.0 or warned) and not call.error and not blocked:
                kind = "high_risk_completion" if warned else "risky_action"
                shown = hits[0].text if hits else "guard warning"
                text = f"{label} completed a high-risk action: {shown}"
                found.append((kind, _evidence(text, call.span_id)))
        if len(denials) >= self.rules.repeated_denials:
            found += [("unauthorized_access", evidence) for evidence in denials]
        output = trajectory.final_output or ""
        anomalies = self.rules.matches(self.rules.anomalies, output)
        if anomalies and not errored:
            text = f"final answer shows an unexpected failure: {anomalies[0]}"
            found.append(("anomaly", _evidence(text, trajectory.final_output_span_id)))
        return [self._assessment(trajectory, found, len(denials))]

    def _assessment(
        self, trajectory: Trajectory, found: list[tuple[str, Evidence]], denials: int
    ) -> Assessment:
        weights = self.rules.outcome_weights
        found.sort(key=lambda item: -weights[item[0]])
        score = weights[found[0][0]] if found else 0.0
        kinds = list(dict.fromkeys(kind for kind, _ in found))
        unauthorized = "unauthorized_access" in kinds
        span_id = next((e.span_id for _, e in found if e.span_id), None)
        if not found:
            explanation = f"{len(trajectory.tool_calls)} tool outcome(s) checked; nothing unusual."
        else:
            explanation = f"outcomes: {', '.join(kinds)}; strongest {kinds[0]} ({score:.2f})."
        return Assessment(
            score,
            [evidence for _, evidence in found[:5]],
            explanation,
            span_id=span_id,
            details={
                "signals": {
                    "tool_risk": 0.7 if unauthorized else 0.0,
                    "uncertainty": 0.0,
                    "violation": False,
                },
                "outcomes": kinds,
                "denied_calls": denials,
            },
        )


def _evidence(text: str, span_id: str | None) -> Evidence:
    return Evidence(text=clip(text), span_id=span_id)
