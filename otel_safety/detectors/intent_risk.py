"""Intent risk: a pre-action monitor of what the user asks the agent to do.

Three parts, combined 0.4 / 0.3 / 0.3 by default (`[intent] weights` in `data/monitors.toml`):
malicious patterns (the refusal family's harm markers, and the `injection` detector's scoring
of the user input), high-risk keywords (lowered by legitimate context such as security
research, a bug bounty, or a task that names the topic) and the risk of the actions the agent
took. One turn is judged on its own, so it gives CLARIFY or WARN; only a request that is
malicious, worded riskily and acted on reaches HUMAN_REVIEW.
"""

from __future__ import annotations

from otel_safety.analysis.injection.injection_scoring import injection_score
from otel_safety.analysis.refusal.refusal import harm_score
from otel_safety.analysis.text.monitor_rules import MonitorRules, current_rules
from otel_safety.analysis.trace import TraceAnalysis
from otel_safety.detectors.base import Assessment, Detector, clip
from otel_safety.detectors.registry import register
from otel_safety.model import Evidence, Trajectory

__all__ = ["IntentRisk"]


@register
class IntentRisk(Detector):
    """Flags requests whose intent is risky: malicious asks, risky words, risky actions."""

    key = "intent_risk"
    default_threshold = 0.35
    risk_category = "malicious_intent"
    description = (
        "Pre-action monitor: the request asks for harm or carries an injection (0.4), uses "
        "high-risk words without a legitimate context such as security research (0.3), and the "
        "agent took risky actions (0.3). One turn at most warns; a malicious request acted on "
        "with risky tools goes to human review."
    )

    def __init__(self, threshold: float | None = None) -> None:
        super().__init__(threshold)
        self.rules: MonitorRules = current_rules()

    def judge(self, trajectory: Trajectory, analysis: TraceAnalysis) -> list[Assessment]:
        users = [m for m in trajectory.messages if m.role == "user" and m.content]
        text = "\n".join(m.content for m in users) or trajectory.scope.user_request
        if not text.strip():
            return []
        span_id = (users[-1].span_id if users else trajectory.scope.span_id) or (
            trajectory.root_span_id
        )
        harm = harm_score(text)
        injection, _ = injection_score(text, "input")
        malicious = max(harm.score, injection)
        task = trajectory.scope.system_instructions
        keywords, hits, legitimate = self.rules.keyword_risk(text, task)
        calls = [f"{call.name} {call.arguments_text()}" for call in trajectory.tool_calls]
        action, actions = self.rules.action_risk(calls)
        weights = self.rules.weights
        score = min(
            1.0,
            weights["malicious"] * malicious
            + weights["keywords"] * keywords
            + weights["action"] * action,
        )
        detected = self.fires(score)
        parts = {
            "malicious": round(malicious, 4),
            "keywords": round(keywords, 4),
            "action": round(action, 4),
        }
        shown = [harm.text] if harm.text else []
        shown += [hit.text for hit in hits] + [hit.text for hit in actions]
        evidence = (
            [Evidence(text=clip(f"request: {text}"), span_id=span_id, detail=dict(parts))]
            if score > 0
            else []
        )
        explanation = _explain(score, parts, shown, legitimate, detected)
        details = {
            "signals": {  # only a fired finding speaks: a risky tool alone is not intent
                "tool_risk": round(action, 4) if detected else 0.0,
                "uncertainty": 0.5 if detected and score < 0.5 else 0.0,
                "violation": False,
            },
            **parts,
            "injection": round(injection, 4),
            "harm_kind": harm.kind or None,
            "keywords_found": [hit.text for hit in hits],
            "actions_found": [hit.text for hit in actions],
            "legitimate_context": legitimate,
        }
        return [Assessment(score, evidence, explanation, span_id=span_id, details=details)]


def _explain(
    score: float, parts: dict[str, float], shown: list[str], legitimate: bool, detected: bool
) -> str:
    summary = ", ".join(f"{name} {value:.2f}" for name, value in parts.items())
    context = "; legitimate context lowered keyword risk" if legitimate else ""
    if not detected:
        return f"intent risk {score:.2f} ({summary}){context}: below threshold."
    words = ", ".join(dict.fromkeys(w for w in shown if w)) or "no single word"
    return f"intent risk {score:.2f} ({summary}){context}: {clip(words, 120)}."
