"""Halted conversations: where a stop verdict waits for the agent's next step.

A behaviour monitor in `active` mode whose finding reaches HARD_STOP halts its
conversation. The verdict comes from the per-turn API (`BehaviorMonitor.process`,
`TurnMonitors.process`) as the turn is judged, or from the trace pipeline once a trace has
ended (`HaltSink`, on the engine's worker). Both write here; the guard reads it before every
inline tool call and refuses a halted conversation's calls, and the pydantic-ai capability
stops the run. Keyed by the conversation id the app and its spans share
(`gen_ai.conversation.id`); bounded and expiring, like the monitors' own state.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field

from otel_safety.conversation import ExpiringStore
from otel_safety.model import EscalationLevel, Finding
from otel_safety.rate_limited import RateLimitedLog
from otel_safety.sink_base import ImmediateSink

if TYPE_CHECKING:
    from otel_safety.pipeline import TraceEvaluation

__all__ = [
    "HALT_RULE",
    "Halt",
    "HaltOn",
    "HaltRegistry",
    "HaltSink",
    "default_halts",
    "halt_reason",
    "halting_findings",
]

logger = logging.getLogger(__name__)

HALT_RULE = "halt.conversation"  # the rule id of a tool call refused because of a halt
ACTIVE = "active"  # MonitorMode.ACTIVE, named here so the guard need not import the monitors
HALT_TTL = 86_400.0  # a day: a stop must outlive the monitors' one-hour memory of the turns
MAX_REASON = 500


class Halt(BaseModel):
    """Why a conversation was halted, and by what."""

    model_config = ConfigDict(extra="forbid")

    conversation: str
    reason: str
    detectors: list[str] = Field(default_factory=list)
    source: Literal["turn", "trace", "operator"] = Field(
        description="turn: the per-turn API, as the turn was judged; trace: the pipeline, "
        "after the trace ended; operator: a person, through the store (`otel-safety halt`)"
    )
    trace_id: str | None = None
    at: float = Field(default_factory=time.time, description="unix seconds")


HaltOn = Literal["active", "hard_stop", "off"]


def halting_findings(findings: Iterable[Finding], on: HaltOn = ACTIVE) -> list[Finding]:
    """The findings that halt a conversation: fired and set at HARD_STOP by the policy (so a
    policy that pins a detector lower also keeps the agent going); with `on="active"` (the
    default) only a behaviour monitor's in active mode, with "hard_stop" any detector's,
    with "off" none."""
    if on == "off":
        return []
    return [
        f
        for f in findings
        if f.detected
        and f.escalation >= EscalationLevel.HARD_STOP
        and (on == "hard_stop" or (f.details or {}).get("mode") == ACTIVE)
    ]


def halt_reason(findings: Sequence[Finding], by_policy: bool = False) -> str:
    """One line naming the halting findings, strongest first, for verdicts and exceptions.
    `by_policy`: the escalation policy (a Cedar deny) set the trace at HARD_STOP, over these
    findings (maybe none)."""
    ranked = sorted(findings, key=lambda f: -f.score)
    parts = [f"{f.detector} ({f.score:.2f}): {f.explanation}{_evidence(f)}" for f in ranked]
    if by_policy:
        over = f" over {'; '.join(parts)}" if parts else ""
        text = f"HARD_STOP by the escalation policy{over}"
    else:
        text = "HARD_STOP by " + "; ".join(parts)
    return text if len(text) <= MAX_REASON else text[: MAX_REASON - 1] + "…"


def _evidence(finding: Finding) -> str:
    """The finding's first quote, unless its explanation says it already (the guard's
    verdict line is both)."""
    if not finding.evidence:
        return ""
    quote = finding.evidence[0].text[:160]
    return "" if quote.strip() in finding.explanation else f" Evidence: {quote}"


class HaltRegistry:
    """Halted conversations, the `max_conversations` most recent, each for `ttl` seconds.

    The first halt of a conversation is kept (later ones add nothing the block needs); a
    person lifts it with `release`. Thread-safe: the engine's worker writes while the app's
    threads read.
    """

    def __init__(
        self,
        *,
        ttl: float = HALT_TTL,
        max_conversations: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._halts: ExpiringStore[Halt] = ExpiringStore(
            ttl=ttl, max_entries=max_conversations, clock=clock, on_crowded_out=self._lifted
        )
        self.stats: Counter[str] = Counter()
        self._crowded_log = RateLimitedLog(logger, limit=5, report_suppressed=True)

    def _lifted(self, conversation: str) -> None:
        """A halt dropped to make room for a newer one: lifted by no one, so counted
        (`stats["crowded_out"]`) and logged, never silent."""
        self.stats["crowded_out"] += 1
        self._crowded_log.warning(
            "otel-safety: the halt of conversation %s was lifted to make room: %d newer "
            "conversations are halted (max_conversations); release reviewed ones",
            conversation,
            self._halts.max_entries,
        )

    def halt(self, halt: Halt) -> Halt:
        """Record `halt` unless its conversation is halted already; the halt in force."""
        with self._halts.lock:
            current = self._halts.peek(halt.conversation)
            if current is not None:
                return current
            self.stats["halted"] += 1
            return self._halts.get(halt.conversation, lambda: halt)

    def get(self, conversation: str | None) -> Halt | None:
        """The halt in force for `conversation`, or None."""
        if not conversation:
            return None
        return self._halts.peek(conversation)

    def release(self, conversation: str) -> Halt | None:
        """Lift a halt (a person reviewed the conversation); the halt lifted, or None."""
        released = self._halts.pop(conversation)
        self.stats["released"] += released is not None
        return released

    def __len__(self) -> int:
        return len(self._halts)


_DEFAULT = HaltRegistry()


def default_halts() -> HaltRegistry:
    """The process's registry: `configure()`'s engine and the per-turn API write to it, and
    every `Guard` reads it unless given another."""
    return _DEFAULT


class HaltSink(ImmediateSink):
    """An engine sink that halts the conversation of every judged trace with halting
    findings: the pipeline's verdicts reach the guard of the same process, and, through
    the store (which records `evaluation.halt`), the guards following it.

    Runs on the engine's worker after the trace ended, so the halt applies from the next
    tool call or model request of that conversation, not to the run that was judged. A trace
    with no conversation id halts nothing (the app could not name it) and is counted."""

    def __init__(
        self, halts: HaltRegistry | None = None, *, on: HaltOn = ACTIVE, in_process: bool = True
    ) -> None:
        # `serve` has no guard of its own to tell (in_process=False): the store alone does.
        self.halts = (halts if halts is not None else default_halts()) if in_process else None
        self.on = on
        self.stats: Counter[str] = Counter()

    def write(self, evaluations: Sequence[TraceEvaluation]) -> None:
        for evaluation in evaluations:
            halting = halting_findings(evaluation.findings, self.on)
            # With "hard_stop", a trace the policy set at HARD_STOP (a Cedar deny over
            # findings each below it) halts too.
            by_policy = (
                not halting
                and self.on == "hard_stop"
                and evaluation.level >= EscalationLevel.HARD_STOP
            )
            if by_policy:
                halting = [f for f in evaluation.findings if f.detected]
            elif not halting:
                continue
            trajectory = evaluation.trajectory
            conversation = trajectory.conversation_id if trajectory else None
            if not conversation:
                self.stats["halts_without_conversation"] += 1
                logger.warning(
                    "otel-safety: trace %s reached a halting HARD_STOP but names no "
                    "conversation (gen_ai.conversation.id): nothing to halt",
                    evaluation.trace_id,
                )
                continue
            evaluation.halt = Halt(
                conversation=conversation,
                reason=halt_reason(halting, by_policy),
                detectors=sorted({f.detector for f in halting}),
                source="trace",
                trace_id=evaluation.trace_id,
            )
            if self.halts is not None:
                self.halts.halt(evaluation.halt)
            self.stats["halts"] += 1
