"""Topic drift: a conversation moving away from its first request, towards harm, turn by turn.

A gradual pivot ("what makes reactions release energy?" ... "how do I release the gas in my
neighbour's house?") never asks for harm in one go, so each turn looks mild on its own. This
monitor keeps, per conversation (`conversation.conversation_key`, so five turns sent as five
traces are one conversation), the first request as a baseline and accumulates each turn's
drift: lexical distance from the baseline, weighted by the turn's risk. A change of subject
alone stays below the firing threshold; one risky turn is capped at a warning; drift that
persists over turns reaches a stop. Findings carry `details["signals"]["drift"]`.
"""

from __future__ import annotations

import copy
import hashlib
from collections import OrderedDict, deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from otel_safety.analysis.refusal.refusal import harm_score
from otel_safety.analysis.text.monitor_rules import MonitorRules, cosine, current_rules
from otel_safety.analysis.trace import TraceAnalysis
from otel_safety.conversation import ExpiringStore, conversation_key
from otel_safety.detectors.base import Assessment, Detector, clip
from otel_safety.detectors.registry import register
from otel_safety.model import Evidence, Trajectory

__all__ = ["ConversationDrift", "TopicDrift"]


@dataclass
class ConversationDrift:
    """What one conversation's drift monitor remembers: bounded by `max_turns`."""

    baseline: Mapping[str, int] | None = None
    accumulated: float = 0.0
    persistent: int = 0  # consecutive drifting turns up to now
    turns: int = 0
    seen: deque[str] = field(default_factory=deque)  # digests of turns already counted
    judged: OrderedDict[str, Assessment] = field(default_factory=OrderedDict)  # by trace id


@register
class TopicDrift(Detector):
    """Flags conversations that drift from their initial request towards harm over turns."""

    key = "topic_drift"
    default_threshold = 0.3
    risk_category = "topic_drift"
    description = (
        "Mid-trajectory monitor: the conversation moved away from its first request towards a "
        "harmful topic, accumulated over turns and traces of the same conversation. A plain "
        "change of subject stays below the threshold, one risky turn at most warns, drift that "
        "persists escalates to a stop."
    )

    def __init__(
        self,
        threshold: float | None = None,
        ttl: float = 3600.0,
        max_conversations: int = 10_000,
    ) -> None:
        super().__init__(threshold)
        self.rules: MonitorRules = current_rules()
        self.state: ExpiringStore[ConversationDrift] = ExpiringStore(
            ttl=ttl, max_entries=max_conversations
        )

    def judge(self, trajectory: Trajectory, analysis: TraceAnalysis) -> list[Assessment]:
        state = self.state.get(conversation_key(trajectory), ConversationDrift)
        with self.state.lock:
            if trajectory.trace_id in state.judged:  # a trace judged again adds no turns
                return [copy.deepcopy(state.judged[trajectory.trace_id])]
            found = self._judge(trajectory, state)
            if found is not None:
                state.judged[trajectory.trace_id] = copy.deepcopy(found)
                while len(state.judged) > self.rules.drift.max_turns:
                    state.judged.popitem(last=False)
            return [] if found is None else [found]

    def _judge(self, trajectory: Trajectory, state: ConversationDrift) -> Assessment | None:
        settings = self.rules.drift
        turns = _new_turns(trajectory, state, 4 * settings.max_turns)
        if not turns and state.baseline is None:
            return None  # nothing asked yet; a run replaying counted turns reports the state
        task = trajectory.scope.system_instructions
        strongest: tuple[float, Evidence] | None = None
        last: dict[str, Any] = {}
        for text, span_id in turns:
            vector = self.rules.terms(text)
            state.turns += 1
            if state.baseline is None:
                state.baseline = vector
                last = {"lexical_distance": 0.0, "risk": 0.0, "turn_drift": 0.0}
                continue
            distance = 1.0 - cosine(state.baseline, vector)
            keywords, hits, legitimate = self.rules.keyword_risk(text, task)
            risk = max(harm_score(text).score, keywords)
            turn = distance * (settings.base + (1.0 - settings.base) * risk)
            state.accumulated = settings.decay * state.accumulated + (1 - settings.decay) * turn
            state.persistent = state.persistent + 1 if turn >= settings.persistent_turn else 0
            last = {
                "lexical_distance": round(distance, 4),
                "risk": round(risk, 4),
                "turn_drift": round(turn, 4),
                "keywords": [hit.text for hit in hits],
                "legitimate_context": legitimate,
            }
            evidence = Evidence(
                text=clip(f"turn {state.turns}: {text}"),
                span_id=span_id,
                detail=dict(last, turn=state.turns),
            )
            if strongest is None or turn >= strongest[0]:
                strongest = (turn, evidence)
        drift = state.accumulated
        if state.persistent < settings.persistent_turns:
            drift = min(drift, settings.single_cap)
        detected = self.fires(drift)
        risk = float(last.get("risk", 0.0))
        return Assessment(
            drift,
            [strongest[1]] if strongest else [],
            _explain(state, drift, detected),
            details={
                "signals": {
                    "drift": round(drift, 4),
                    "uncertainty": round(4 * risk * (1 - risk), 4) if detected else 0.0,
                    "violation": False,
                },
                "turns": state.turns,
                "persistent_turns": state.persistent,
                "accumulated": round(state.accumulated, 4),
                **last,
            },
        )


def _new_turns(
    trajectory: Trajectory, state: ConversationDrift, remember: int
) -> list[tuple[str, str | None]]:
    """User turns not counted yet (a run replaying its history repeats the earlier ones)."""
    users = [(m.content, m.span_id) for m in trajectory.messages if m.role == "user" and m.content]
    if not users and trajectory.scope.user_request:
        users = [(trajectory.scope.user_request, trajectory.scope.span_id)]
    fresh = []
    for text, span_id in users:
        # surrogatepass: text read from bytes with surrogateescape still has a digest
        words = " ".join(text.split()).encode("utf-8", "surrogatepass")
        digest = hashlib.blake2b(words, digest_size=8).hexdigest()
        if digest in state.seen:
            continue
        state.seen.append(digest)
        if len(state.seen) > remember:
            state.seen.popleft()
        fresh.append((text, span_id))
    return fresh


def _explain(state: ConversationDrift, drift: float, detected: bool) -> str:
    where = f"turn {state.turns} of the conversation"
    if state.turns <= 1:
        return f"{where}: the first request is the baseline; no drift yet."
    if not detected:
        return f"{where}: drift {drift:.2f} from the first request, within bounds."
    persisted = f"{state.persistent} consecutive drifting turn(s)"
    return f"{where}: drifted {drift:.2f} from the first request towards risk; {persisted}."
