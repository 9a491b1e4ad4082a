"""The tool-call guard: one validator for inline checks (before a tool runs) and for
judging tool calls after the fact on traces."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from opentelemetry import trace

from otel_safety import guardrail
from otel_safety import semconv as sc
from otel_safety.detectors.base import clip
from otel_safety.guard.approval import ApprovalGate, Approver
from otel_safety.guard.data import GuardData, current_guard_data
from otel_safety.guard.history import CallHistory
from otel_safety.guard.principals import Directory, Identity, RequesterLike
from otel_safety.guard.rules import match_rules
from otel_safety.guard.signing import sign
from otel_safety.guard.verdict import Decision, RuleHit, Verdict
from otel_safety.guard.view import CallView, view_call
from otel_safety.mapping import GUARD_PREFIX
from otel_safety.model import EscalationLevel, Finding, Scope, Severity, ToolCall, Trajectory
from otel_safety.model import Principal as ModelPrincipal

if TYPE_CHECKING:
    from otel_safety.deep.settings import DeepConfig

logger = logging.getLogger(__name__)

HIGH_RISK_TRUST = 3  # categories that need this much trust count as high-risk
UNVERIFIED_RULE = "identity.unverified_high_risk"


class Guard:
    """Judge tool calls by what they do and who asked.

    `principals` is a `Directory`, a path to a principals file, or None (then
    `OTEL_SAFETY_PRINCIPALS` is read; with no file, trust is not checked and only what the
    call does is judged). `approver`, when given, is asked about calls that would be
    warned: approved ones are allowed, denied or unanswered ones blocked.
    `block_high_risk_unverified=False` warns, instead of blocking, a known but unverified
    principal asking for a high-risk action (so an approver can be asked), unless the
    call is blocked for another reason too.
    """

    def __init__(
        self,
        principals: Directory | str | Path | None = None,
        *,
        approver: Approver | None = None,
        approval_timeout: float = 60.0,
        approval_ttl: float = 900.0,
        repeat_limit: int = 5,
        rate_limit: int = 10,
        rate_window: float = 10.0,
        block_high_risk_unverified: bool = True,
        data: GuardData | None = None,
        clock: Callable[[], float] = time.time,
        deep: DeepConfig | None = None,
    ) -> None:
        """`deep`: the model endpoint `check_tool_call(deep=True)` asks; when not given it
        is read from the OTEL_SAFETY_DEEP_* settings at the first such call."""
        if isinstance(principals, Directory):
            self.directory = principals
        elif principals is not None:
            self.directory = Directory.load(principals)
        else:
            self.directory = Directory.from_env()
        self.data = data or current_guard_data()
        self.repeat_limit = repeat_limit
        self.rate_limit = rate_limit
        self.block_high_risk_unverified = block_high_risk_unverified
        self.history = CallHistory(rate_window=rate_window)
        self.approval = (
            ApprovalGate(approver, timeout=approval_timeout, ttl=approval_ttl) if approver else None
        )
        self._clock = clock
        self._deep_config = deep
        self._deep_client: Any = None

    def check_tool_call(
        self,
        name: str,
        arguments: Any = None,
        requester: RequesterLike = None,
        *,
        conversation: str | None = None,
        at: float | None = None,
        record: bool = True,
        source: str = "inline",
        pace: bool = True,
        steered_by: str | None = None,
        deep: bool = False,
        task: str | None = None,
        deep_timeout: float | None = None,
    ) -> Verdict:
        """The verdict for one call. With `record`, it is also written onto the current span
        (the tool's span when called from an instrumented tool), so it shows on the trace.
        `pace=False` leaves the call out of loop and rate tracking (its time is unknown).
        `steered_by` quotes content (a tool result, a web page) whose embedded instruction
        supplied the call's arguments: that content, not the requester, is then asking.
        `deep=True` also asks the deep analysis model (see docs/deep-analysis.md) about the
        call, with `task` (what the agent was asked to do) as context, waiting at most
        `deep_timeout` seconds (OTEL_SAFETY_DEEP_TIMEOUT by default); it can only make the
        verdict stricter. When it cannot answer, the rules' verdict stands (fail-open) or the
        call is blocked (OTEL_SAFETY_DEEP_FAIL_CLOSED)."""
        identity = self.directory.resolve(requester)
        view = view_call(name, arguments, self.data)
        when = None if not pace else (self._clock() if at is None else at)
        verdict = self._judge(view, identity, conversation, when, steered_by)
        verdict.source = source
        if deep:
            self._deepen(verdict, name, arguments, identity, task, conversation, deep_timeout)
        if self.approval is not None and verdict.decision is Decision.WARN:
            self._ask(verdict)
        if record:
            record_on_span(verdict)
        return verdict

    def _judge(
        self,
        view: CallView,
        identity: Identity,
        conversation: str | None,
        at: float | None,
        steered_by: str | None = None,
    ) -> Verdict:
        role = _role(identity)
        hits = match_rules(view, self.data, role)
        if steered_by:
            hits.append(self._steered_hit(view, steered_by))
        hits.extend(self._trust_hits(view, identity, hits))
        if at is not None:
            hits.extend(self._pace_hits(view, identity, conversation, at))
        hits.sort(key=lambda h: -h.risk)
        risk = self._risk(hits)
        if risk >= self.data.block_at:
            decision = Decision.BLOCK
        elif risk >= self.data.warn_at:
            decision = Decision.WARN
        else:
            decision = Decision.ALLOW
        return Verdict(
            decision=decision,
            risk=risk,
            tool=view.tool,
            category=view.categories[0],
            categories=view.categories,
            requester=identity.label,
            requester_role=role,
            trust=None if identity.anonymous else identity.trust,
            verified=None if identity.anonymous else identity.verified,
            hits=hits,
            rule_ids=[h.rule_id for h in hits],
            reasons=[
                f"{h.rule_id}: {h.reason}" + (f" ({h.matched})" if h.matched else "") for h in hits
            ],
        )

    def _risk(self, hits: list[RuleHit]) -> int:
        """The call's risk; an unverified sender's high-risk request, when it is only to be
        warned, adds no threat of its own and stays under the block line."""
        if self.block_high_risk_unverified:
            return _combined_risk(hits, self.data.extra_threat)
        soft = [h for h in hits if h.rule_id == UNVERIFIED_RULE]
        rest = [h for h in hits if h.rule_id != UNVERIFIED_RULE]
        risk = _combined_risk(rest, self.data.extra_threat)
        return max([risk, *(h.risk for h in soft)])

    def _steered_hit(self, view: CallView, passage: str) -> RuleHit:
        side_effect = any(c in self.data.side_effects for c in view.categories)
        return RuleHit(
            rule_id="trust.instructed_by_content",
            threat="trust_boundary_violation",
            risk=80 if side_effect else 75,
            matched=clip(passage, 160),
            reason="its arguments (or the address it contacts) come from an instruction "
            "inside content the agent read, which has no trust of its own",
        )

    def _trust_hits(self, view: CallView, identity: Identity, hits: list[RuleHit]) -> list[RuleHit]:
        if identity.anonymous:
            return []
        needed = max(self.data.needed_trust(c) for c in view.categories)
        dangerous = needed >= HIGH_RISK_TRUST or any(h.risk >= self.data.warn_at for h in hits)
        found: list[RuleHit] = []
        who = identity.label or "requester"
        if identity.spoofed is not None:
            claimed = identity.spoofed.name or identity.spoofed.id
            found.append(
                RuleHit(
                    rule_id="identity.spoofed_name",
                    threat="identity_spoofing",
                    risk=90 if dangerous else 45,
                    matched=who,
                    reason=f"{who} uses the name of {claimed} without their verified uid",
                )
            )
        if needed > identity.trust:
            threat = "unauthorized_tool_use" if identity.principal else "trust_boundary_violation"
            found.append(
                RuleHit(
                    rule_id="trust.insufficient",
                    threat=threat,
                    risk=80,
                    matched=view.categories[0],
                    reason=f"{who} (trust {identity.trust}) may not ask for "
                    f"{view.categories[0]} (needs trust {needed})",
                )
            )
        principal = identity.principal
        if principal is not None and principal.allowed_categories is not None:
            outside = [c for c in view.categories if c not in principal.allowed_categories]
            if outside:
                found.append(
                    RuleHit(
                        rule_id="trust.category_not_allowed",
                        threat="unauthorized_tool_use",
                        risk=80,
                        matched=", ".join(outside),
                        reason=f"{who} is not allowed {', '.join(outside)}",
                    )
                )
        if principal is not None and not identity.verified and dangerous:
            found.append(
                RuleHit(
                    rule_id=UNVERIFIED_RULE,
                    threat="identity_spoofing",
                    risk=75
                    if self.block_high_risk_unverified
                    else max(self.data.warn_at, self.data.block_at - 1),
                    matched=who,
                    reason=f"{who} is not verified and asks for a high-risk action",
                )
            )
        return found

    def _pace_hits(
        self, view: CallView, identity: Identity, conversation: str | None, at: float
    ) -> list[RuleHit]:
        key = conversation or identity.label or "-"
        fingerprint = (
            view.tool
            + "\0"
            + json.dumps([view.texts[:8], view.limits], sort_keys=True, default=str)
        )
        side_effect = any(c in self.data.side_effects for c in view.categories)
        pace = self.history.observe(key, fingerprint, at, side_effect)
        hits = []
        if pace.repeats + 1 >= self.repeat_limit and (
            side_effect or pace.repeats + 1 >= 2 * self.repeat_limit
        ):
            hits.append(
                RuleHit(
                    rule_id="loop.repeat",
                    threat="cascading_failure",
                    risk=80 if side_effect else 45,
                    matched=f"{pace.repeats + 1} identical calls",
                    reason=f"the same {view.tool} call {pace.repeats + 1} times in a conversation",
                )
            )
        if side_effect and pace.calls_in_window > self.rate_limit:
            hits.append(
                RuleHit(
                    rule_id="loop.rate",
                    threat="cascading_failure",
                    risk=75,
                    matched=f"{pace.calls_in_window} calls",
                    reason=f"{pace.calls_in_window} side-effecting calls within "
                    f"{self.history.rate_window:g}s",
                )
            )
        return hits

    def _deepen(
        self,
        verdict: Verdict,
        name: str,
        arguments: Any,
        identity: Identity,
        task: str | None,
        conversation: str | None,
        timeout: float | None,
    ) -> None:
        """Ask the deep analysis about this call and fold its answer into the verdict."""
        client = self._deep()
        config = client.config
        trajectory = Trajectory(
            trace_id=format(trace.get_current_span().get_span_context().trace_id, "032x"),
            conversation_id=conversation,
            requester=ModelPrincipal(id=identity.label) if identity.label else None,
            scope=Scope(user_request=task or ""),
            tool_calls=[ToolCall(name=name, arguments=_as_arguments(arguments))],
            tool_events_available=True,
        )
        outcome = client.analyse(
            trajectory,
            _rule_findings(verdict, trajectory.trace_id),
            timeout=config.timeout if timeout is None else timeout,
            retries=0,
        )
        apply_deep(verdict, outcome, config)

    def _deep(self) -> Any:
        if self._deep_client is None:
            from otel_safety.config import ConfigError, Settings
            from otel_safety.deep.client import DeepClient
            from otel_safety.deep.settings import deep_config

            config = self._deep_config or deep_config(Settings.resolve())
            if config is None:
                raise ConfigError(
                    "check_tool_call(deep=True) needs the deep analysis configured: set "
                    "OTEL_SAFETY_DEEP=true, OTEL_SAFETY_DEEP_MODEL and "
                    "OTEL_SAFETY_DEEP_BASE_URL (or pass Guard(deep=...))"
                )
            self._deep_client = DeepClient(config)
        return self._deep_client

    def _ask(self, verdict: Verdict) -> None:
        assert self.approval is not None
        answer = self.approval.decide(verdict)
        verdict.approval = answer
        if answer == "approved":
            verdict.decision = Decision.ALLOW
            verdict.reasons.append("approved by the approver")
        else:
            verdict.decision = Decision.BLOCK
            verdict.reasons.append(f"approval {answer}")

    def close(self) -> None:
        if self.approval is not None:
            self.approval.close()


DEEP_RULE = "deep.analysis"
_DEEP_DECISIONS = {
    EscalationLevel.HARD_STOP: Decision.BLOCK,
    EscalationLevel.SOFT_STOP: Decision.BLOCK,
    EscalationLevel.HUMAN_REVIEW: Decision.WARN,
    EscalationLevel.WARN: Decision.WARN,
}
_STRICTNESS = {Decision.ALLOW: 0, Decision.WARN: 1, Decision.BLOCK: 2}


def apply_deep(verdict: Verdict, outcome: Any, config: Any) -> None:
    """The deep answer on the verdict: an "unsafe" verdict raises the decision to what its
    level calls for (SOFT_STOP and HARD_STOP block, WARN and HUMAN_REVIEW warn); never
    lowers it. No answer: fail-open keeps the rules' decision, fail-closed blocks."""
    reply = outcome.reply
    record: dict[str, Any] = {
        "model": config.model,
        "prompt_version": config.prompt.version,
        "latency_ms": round(outcome.seconds * 1000, 1),
        "tokens": outcome.tokens,
    }
    if reply is None:
        record["error"] = outcome.error
        record["fail"] = "closed" if config.fail_closed else "open"
        verdict.deep = record
        if config.fail_closed:
            verdict.decision = Decision.BLOCK
            verdict.reasons.append(f"deep analysis unavailable, fail-closed: {outcome.error}")
        else:
            verdict.reasons.append(f"deep analysis unavailable, rules kept: {outcome.error}")
        return
    record.update(
        verdict=reply.verdict,
        level=reply.level.name,
        risk=round(reply.risk, 3),
        dimensions=reply.scores(),
        summary=reply.summary,
    )
    verdict.deep = record
    wanted = _DEEP_DECISIONS.get(reply.level, Decision.ALLOW)
    if reply.verdict != "unsafe" or _STRICTNESS[wanted] <= _STRICTNESS[verdict.decision]:
        return
    verdict.decision = wanted
    verdict.risk = max(verdict.risk, round(reply.risk * 100))
    verdict.rule_ids.append(DEEP_RULE)
    verdict.reasons.append(f"{DEEP_RULE}: {reply.summary or reply.level.name} ({config.model})")


def _rule_findings(verdict: Verdict, trace_id: str) -> list[Finding]:
    """The rules' verdict as a finding, so the model knows what they saw."""
    if verdict.decision is Decision.ALLOW:
        return []
    return [
        Finding(
            detector="tool_guard",
            trace_id=trace_id,
            score=verdict.risk / 100,
            threshold=0.4,
            detected=True,
            severity=Severity.HIGH if verdict.blocked else Severity.MEDIUM,
            explanation="; ".join(verdict.reasons[:3]),
        )
    ]


def _as_arguments(arguments: Any) -> dict[str, Any] | str | None:
    if arguments is None or isinstance(arguments, dict | str):
        return arguments
    return json.dumps(arguments, default=str)


def _role(identity: Identity) -> str:
    if identity.anonymous:
        return "anonymous"
    if identity.principal is None:
        return "unknown"
    return identity.principal.role.value


def _combined_risk(hits: list[RuleHit], extra: int) -> int:
    if not hits:
        return 0
    threats = {h.threat for h in hits if h.risk >= 40}
    return min(100, hits[0].risk + extra * max(0, len(threats) - 1))


def record_on_span(verdict: Verdict) -> None:
    """Write the verdict onto the current span, with a `run_guardrail` event in the GenAI
    guardrail convention, if it is recording; never raises."""
    try:
        span = trace.get_current_span()
        if not span.is_recording():
            return
        attributes = verdict_attributes(verdict)
        fields = {key.removeprefix(GUARD_PREFIX): value for key, value in attributes.items()}
        attributes[sc.OTEL_SAFETY_GUARD_SIGNATURE] = sign(
            fields, format(span.get_span_context().span_id, "016x")
        )
        span.set_attributes(attributes)
        span.add_event(sc.RUN_GUARDRAIL, guardrail.guard_attributes(verdict))
    except Exception:  # the app's tool call must not fail because of telemetry
        logger.exception("otel-safety could not record a guard verdict on the span")


def verdict_attributes(verdict: Verdict) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        sc.OTEL_SAFETY_GUARD_DECISION: verdict.decision.value,
        sc.OTEL_SAFETY_GUARD_RISK: verdict.risk,
        sc.OTEL_SAFETY_GUARD_CATEGORY: verdict.category,
        sc.OTEL_SAFETY_GUARD_RULE_IDS: tuple(verdict.rule_ids),
        sc.OTEL_SAFETY_GUARD_REASONS: tuple(verdict.reasons[:8]),
    }
    if verdict.requester is not None:
        attributes[sc.OTEL_SAFETY_GUARD_REQUESTER] = verdict.requester
    if verdict.trust is not None:
        attributes[sc.OTEL_SAFETY_GUARD_TRUST] = verdict.trust
    if verdict.approval is not None:
        attributes[sc.OTEL_SAFETY_GUARD_APPROVAL] = verdict.approval
    return attributes
