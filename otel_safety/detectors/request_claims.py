"""`request_claims`: what each model call was asked and how it answered, as claims policies
read: one finding per model call, on the call's span, never fired by itself.

The claims reuse the refusal family's and the injection detector's rules: `adversarial_risk`
is the stronger of the jailbreak-attempt score (override, persona, role-play, machine-made
suffix) and the injection rules' score of the user turn that prompted the call; `refused`
says the call's answer reads as a refusal. They annotate (the finding's score is the
adversarial risk, the claims sit in `details["claims"]` and in the evidence) and an
escalation policy decides what they mean, a Cedar policy through `context.claims`. So the
finding does not fire: a risky request is the other detectors' verdict to give, and
firing here would count every jailbreak attempt twice.
"""

from __future__ import annotations

from dataclasses import dataclass

from otel_safety.analysis.injection.injection_scoring import InjectionMatch, injection_score
from otel_safety.analysis.refusal.refusal import adversarial_score, refusal_level, refusal_score
from otel_safety.analysis.trace import TraceAnalysis
from otel_safety.detectors.base import Assessment, Detector, clip
from otel_safety.detectors.registry import register
from otel_safety.model import Evidence, Trajectory

REFUSED_AT = 0.5  # the refusal score from which an answer counts as refused (over_refusal's)


@dataclass
class ModelCall:
    """One model call as the trajectory shows it: its span, what prompted it, its answer."""

    span_id: str
    request: str
    answer: str


@register
class RequestClaims(Detector):
    key = "request_claims"
    default_threshold = 1.0
    risk_category = None
    description = (
        "Claims about each model call for escalation policies: the adversarial-pattern risk "
        "of the request that prompted it and whether its answer refused. One finding per "
        "call, on its span; it never fires by itself."
    )

    @property
    def can_fire(self) -> bool:
        return False

    def judge(self, trajectory: Trajectory, analysis: TraceAnalysis) -> list[Assessment]:
        return [self._claims(call) for call in model_calls(trajectory)]

    def _claims(self, call: ModelCall) -> Assessment:
        attempt = adversarial_score(call.request)
        injection, matches = injection_score(call.request, source="input")
        risk = max(attempt.score, injection)
        level = refusal_level(call.answer)  # most answers: no refusal, their words unread
        refusal_text = refusal_score(call.answer).text if level else ""
        refused = level >= REFUSED_AT
        claims = {"adversarial_risk": round(risk, 6), "refused": refused}
        why = (
            f"adversarial risk {risk:.2f}"
            + (f" ({attempt.kind})" if attempt.score >= injection and attempt.kind else "")
            + (f" (injection rule {matches[0].rule})" if injection > attempt.score else "")
            + ("; the answer refused" if refused else "; the answer did not refuse")
        )
        quote = attempt.text if attempt.score >= injection else _first_match(matches)
        return Assessment(
            risk,
            [
                Evidence(
                    text=clip(quote or refusal_text or call.request),
                    span_id=call.span_id,
                    detail={"claims": claims, "refusal_score": round(level, 3)},
                )
            ],
            f"Model call claims: {why}.",
            span_id=call.span_id,
            details={"claims": claims},
        )


def model_calls(trajectory: Trajectory) -> list[ModelCall]:
    """Each span with an assistant answer, with the user turns since the previous answer
    (the first call also reads the declared request when no user message is captured)."""
    calls: dict[str, ModelCall] = {}
    pending: list[str] = []
    for message in trajectory.messages:
        if message.role == "user" and message.content:
            pending.append(message.content)
        elif message.role == "assistant" and message.span_id is not None:
            request = "\n".join(pending) or (trajectory.scope.user_request if not calls else "")
            call = calls.get(message.span_id)
            if call is None:
                calls[message.span_id] = ModelCall(message.span_id, request, message.content)
            else:  # several answers from one call: one claim set for the call
                call.answer = "\n".join(filter(None, (call.answer, message.content)))
            pending = []
    return list(calls.values())


def _first_match(matches: list[InjectionMatch]) -> str:
    return matches[0].text if matches else ""
