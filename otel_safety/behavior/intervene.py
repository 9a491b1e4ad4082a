"""The per-turn API: judge an agent's turn as it is produced and say whether to stop it.

The trace pipeline judges a trace once its spans have ended, which is too late to stop the
run that made it. `BehaviorMonitor.process(turn)` (one monitor) and `TurnMonitors.process`
(several) run the same per-turn step the pipeline runs for each new turn of a trace, on the
same per-conversation memory, and return a `TurnResult`: the findings, the level the policy
gives them, and `should_halt` when an `active` monitor's finding reaches HARD_STOP. A halt is
written to the halt registry, where the guard refuses the conversation's next tool calls.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from otel_safety.analysis.secrets import mask
from otel_safety.behavior.turns import AgentTurn
from otel_safety.halts import Halt, HaltRegistry, default_halts, halt_reason, halting_findings
from otel_safety.model import EscalationLevel, Finding, Message, ToolCall, Trajectory
from otel_safety.policy import Policy

if TYPE_CHECKING:
    from otel_safety.behavior.monitor import BehaviorMonitor

__all__ = ["TurnMonitors", "TurnResult", "decide_turn", "turn_trajectory"]


class TurnResult(BaseModel):
    """What the monitors made of one turn, and whether the agent must stop before its next
    action (`should_halt`, with the `reason`)."""

    model_config = ConfigDict(extra="forbid")

    conversation: str | None
    agent: str
    findings: list[Finding] = Field(default_factory=list)
    level: EscalationLevel = EscalationLevel.NONE
    should_halt: bool = False
    reason: str | None = Field(default=None, description="why the agent must stop")

    @property
    def flagged(self) -> bool:
        return any(f.detected for f in self.findings)


def turn_trajectory(
    turn: AgentTurn, conversation: str | None = None, context: Trajectory | None = None
) -> Trajectory:
    """The run a turn is judged in: `context` (what the run contained: tool results, user
    inputs, its time) under the given conversation, else the turn alone as a one-turn run."""
    if context is not None:
        if conversation and conversation != context.conversation_id:
            return context.model_copy(update={"conversation_id": conversation})
        return context
    return Trajectory(
        trace_id=uuid.uuid4().hex,
        conversation_id=conversation,
        agent_names=[turn.agent],
        messages=[
            Message(role="user", content=turn.prompt),
            Message(role="assistant", content=turn.text, agent=turn.agent, span_id=turn.span_id),
        ],
        tool_calls=[ToolCall(name=name) for name in turn.tool_calls],
        final_output=turn.text,
        final_output_span_id=turn.span_id,
    )


def decide_turn(
    findings: list[Finding],
    turn: AgentTurn,
    *,
    conversation: str | None,
    policy: Policy | None = None,
    halts: HaltRegistry | None = None,
    run: Trajectory | None = None,
) -> TurnResult:
    """The level `policy` gives the turn's findings and whether they halt the conversation
    (the rule the pipeline's `HaltSink` applies to a trace). A conversation halted already,
    by an earlier turn or trace, stays halted. `run`: the turn's run, which the policy reads
    as it reads a trace (a Cedar rule on the agent's name needs it)."""
    if policy is None:
        from otel_safety.policies.safeguards import SafeguardsPolicy

        policy = SafeguardsPolicy()
    halts = halts if halts is not None else default_halts()
    trace_id = findings[0].trace_id if findings else uuid.uuid4().hex
    judged = run or Trajectory(trace_id=trace_id, conversation_id=conversation)
    level = policy.decide(findings, judged)
    halting = halting_findings(findings)
    halt = halts.get(conversation)
    if halting and halt is None:
        reason = halt_reason(halting)
        if conversation:
            halt = halts.halt(
                Halt(
                    conversation=conversation,
                    reason=reason,
                    detectors=sorted({f.detector for f in halting}),
                    source="turn",
                    trace_id=trace_id,
                )
            )
        else:
            return _result(turn, None, findings, level, reason)
    return _result(turn, conversation, findings, level, halt.reason if halt else None)


def _result(
    turn: AgentTurn,
    conversation: str | None,
    findings: list[Finding],
    level: EscalationLevel,
    reason: str | None,
) -> TurnResult:
    return TurnResult(
        conversation=conversation,
        agent=turn.agent,
        findings=findings,
        level=level,
        should_halt=reason is not None,
        reason=reason,
    )


class TurnMonitors:
    """Several behaviour monitors judging each turn together, under one policy, writing
    halts to one registry. With no `monitors`, the four built-in ones with their data files'
    settings; `modes` sets modes by key (`{"ethics_boundary": "active"}`)."""

    def __init__(
        self,
        monitors: Sequence[BehaviorMonitor] | None = None,
        *,
        modes: Mapping[str, str] | None = None,
        policy: Policy | None = None,
        halts: HaltRegistry | None = None,
    ) -> None:
        if monitors is None:
            monitors = _builtin_monitors(modes or {})
        elif modes:
            raise ValueError("give `modes` only without `monitors`: set each monitor's own mode")
        if not monitors:
            raise ValueError("TurnMonitors needs at least one monitor")
        self.monitors = list(monitors)
        self.policy = policy
        self.halts = halts if halts is not None else default_halts()
        mask("")  # the secret patterns evidence is masked with: compiled now, not on a turn

    def process(
        self,
        turn: AgentTurn,
        *,
        conversation: str | None = None,
        context: Trajectory | None = None,
        halts: HaltRegistry | None = None,
    ) -> TurnResult:
        """Every monitor's finding on `turn`, the policy's level and the halt decision (a
        halt goes to `halts` when given: the guard's registry, which its checks read)."""
        run = turn_trajectory(turn, conversation, context)
        findings = [
            m.judge_turn(turn, conversation=conversation, context=run) for m in self.monitors
        ]
        return decide_turn(
            findings,
            turn,
            conversation=run.conversation_id,
            policy=self.policy,
            halts=halts if halts is not None else self.halts,
            run=run,
        )


def _builtin_monitors(modes: Mapping[str, str]) -> list[BehaviorMonitor]:
    from otel_safety import detectors as detector_registry
    from otel_safety.behavior.modes import MonitorMode
    from otel_safety.behavior.monitor import BehaviorMonitor

    known = {
        key: cls
        for key, cls in detector_registry.available().items()
        if issubclass(cls, BehaviorMonitor)
    }
    unknown = sorted(set(modes) - set(known))
    if unknown:
        raise ValueError(f"not behaviour monitors: {', '.join(unknown)}; known: {', '.join(known)}")
    built = []
    for key in sorted(known):
        mode = modes.get(key)
        extra = {"mode": MonitorMode.parse(mode)} if mode is not None else {}
        built.append(known[key](**extra))
    return built
