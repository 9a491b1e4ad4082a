"""The guard's synchronous deep check: one call put to the deep analysis model, inline.

`Guard.check_tool_call(..., deep=True)` asks the model (see docs/deep-analysis.md) about the
call before it runs. Its answer can only make the verdict stricter; when it cannot answer,
the rules' verdict stands (fail-open) or the call is blocked (fail-closed).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from opentelemetry import trace

from otel_safety.guard.principals import Identity
from otel_safety.guard.verdict import Decision, Verdict
from otel_safety.model import EscalationLevel, Finding, Scope, Severity, ToolCall, Trajectory
from otel_safety.model import Principal as ModelPrincipal

if TYPE_CHECKING:
    from otel_safety.deep.client import DeepClient
    from otel_safety.deep.settings import DeepConfig

__all__ = ["DEEP_RULE", "apply_deep", "ask_deep", "deep_client"]


def deep_client(config: DeepConfig | None) -> DeepClient:
    """The client for `config`, or for the OTEL_SAFETY_DEEP_* settings when None."""
    from otel_safety.config import ConfigError, Settings
    from otel_safety.deep.client import DeepClient
    from otel_safety.deep.settings import deep_config

    config = config or deep_config(Settings.resolve())
    if config is None:
        raise ConfigError(
            "check_tool_call(deep=True) needs the deep analysis configured: set "
            "OTEL_SAFETY_DEEP=true, OTEL_SAFETY_DEEP_MODEL and "
            "OTEL_SAFETY_DEEP_BASE_URL (or pass Guard(deep=...))"
        )
    return DeepClient(config)


def ask_deep(
    client: DeepClient,
    verdict: Verdict,
    name: str,
    arguments: Any,
    identity: Identity,
    task: str | None,
    conversation: str | None,
    timeout: float | None,
) -> None:
    """Ask the model about one call (with `task` as context) and fold its answer in."""
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
