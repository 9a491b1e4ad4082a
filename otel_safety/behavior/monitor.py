"""The base every behaviour monitor shares: settings, per-agent state, modes, findings.

A monitor sees each trace once (a trace judged again returns the same finding), picks the
agent turns it has not counted yet in this conversation, and hands each one, with that
agent's memory, to `observe`, which returns indicators. A trace usually re-sends the
conversation so far: the new turns are those after the last one already counted. The
finding's score is the strongest indicator; whether it fires depends on the mode and on the
threshold scaled by the sensitivity. State lives in an `ExpiringStore` keyed by
conversation, so five turns sent as five traces build one baseline, and memory stays bounded.
"""

from __future__ import annotations

import threading
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from otel_safety.analysis.patterns.datafiles import current_data_dir, load_data, read_toml
from otel_safety.analysis.trace import TraceAnalysis
from otel_safety.behavior.indicators import Indicator
from otel_safety.behavior.intervene import TurnResult, decide_turn, turn_trajectory
from otel_safety.behavior.modes import MonitorMode, alert_threshold
from otel_safety.behavior.turns import AgentTurn, agent_turns
from otel_safety.conversation import ExpiringStore, conversation_key
from otel_safety.detectors.base import Assessment, Detector
from otel_safety.detectors.severity import Ladder, ladders_for_judging
from otel_safety.halts import HaltRegistry
from otel_safety.model import Finding, Severity, Trajectory
from otel_safety.policy import Policy

__all__ = ["AgentState", "BehaviorMonitor", "MonitorParams"]

_STORED = TypeAdapter(Assessment)  # a judged trace's assessment, kept as JSON
_TURN_FOUND = TypeAdapter(list[Indicator])  # a turn judged per turn: its indicators as JSON
PER_TURN_KEPT = 32  # turns judged per turn whose trace has not come yet, per conversation

Memory = TypeVar("Memory")
MAX_EVIDENCE = 5
MAX_INDICATORS = 20  # per finding, strongest first; the rest are only counted by type
JUDGED_TRACES = 32  # findings kept per conversation for traces judged again
STATE_BYTES = 64 << 20  # per monitor, over all conversations (see `_state_bytes`)
AGENT_STATE_BYTES = 2_048  # what one agent's memory weighs, roughly: counters and digests
# Compiled rules by (monitor class, data folder, settings): every pipeline, eval run and
# worker builds its own monitors, and compiling their word lists costs a third of a second.
_COMPILED_RULES: OrderedDict[tuple[type, str | None, str], Any] = OrderedDict()
_COMPILED_RULES_LOCK = threading.Lock()
COMPILED_RULES_KEPT = 64


class MonitorParams(BaseModel):
    """Settings every monitor has; each monitor's `[monitor]` data table and constructor
    arguments fill them (arguments win). Monitors subclass this with their own fields."""

    model_config = ConfigDict(extra="forbid")

    mode: MonitorMode = MonitorMode.PASSIVE
    sensitivity: float = Field(0.5, ge=0.0, le=1.0)
    max_agents: int = Field(32, ge=1, description="agents remembered per conversation")
    max_turns: int = Field(256, ge=1, description="turn digests remembered per conversation")


@dataclass
class AgentState(Generic[Memory]):
    """One agent in one conversation: its monitor-specific memory and the turns counted."""

    memory: Memory
    turns: int = 0


@dataclass
class ConversationState(Generic[Memory]):
    agents: OrderedDict[str, AgentState[Memory]] = field(default_factory=OrderedDict)
    seen: OrderedDict[str, None] = field(default_factory=OrderedDict)  # turn digests, oldest first
    judged: OrderedDict[str, bytes] = field(default_factory=OrderedDict)  # assessment JSON by trace
    # Indicators of turns judged as they happened (`process`), JSON by turn digest: their
    # trace reports them, and does not count the turn again.
    per_turn: OrderedDict[str, bytes] = field(default_factory=OrderedDict)


def _state_bytes(state: ConversationState[Any]) -> int:
    """A conversation's weight for the monitor's byte budget: the findings kept for late
    spans (their JSON), the turn digests, and a fixed weight per agent."""
    return (
        sum(len(finding) for finding in state.judged.values())
        + sum(len(found) for found in state.per_turn.values())
        + 64 * len(state.seen)
        + AGENT_STATE_BYTES * len(state.agents)
    )


class BehaviorMonitor(Detector, Generic[Memory]):
    """Subclasses set `key`, `description`, `default_threshold`, `params_model` and
    implement `new_memory` and `observe`; `compile` turns their data file into rules."""

    severity = Severity.MEDIUM
    params_model: ClassVar[type[MonitorParams]] = MonitorParams

    def __init__(
        self,
        threshold: float | None = None,
        *,
        data_dir: str | None = None,
        ttl: float = 3600.0,
        max_conversations: int = 10_000,
        **settings: Any,
    ) -> None:
        super().__init__(threshold)
        label = f"{self.key} monitor"
        try:
            folder = data_dir or current_data_dir()
            own = Path(folder) / f"{self.key}.toml" if folder else None
            if own is not None and own.is_file():  # a setting of the user's file: name it
                label = f"{self.key} monitor ({own})"
            data = load_data(self.key, data_dir=folder)
            given = {k: v for k, v in settings.items() if v is not None}
            self.params = self.params_model(**{**_monitor_table(self.key, folder), **given})
            self.load_shared_data()
            self.rules = self._compiled_rules(folder, data)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc']))}: {e['msg']}, got {e['input']!r}"
                for e in exc.errors()
            )
            raise ValueError(f"{label}: {problems}") from None
        except ValueError as exc:
            raise ValueError(f"{label}: {exc}") from exc
        self.mode = self.params.mode
        self.alert_at = alert_threshold(self.threshold, self.params.sensitivity)
        self.state: ExpiringStore[ConversationState[Memory]] = ExpiringStore(
            ttl=ttl, max_entries=max_conversations, max_bytes=STATE_BYTES, weigh=_state_bytes
        )

    def _compiled_rules(self, folder: str | Path | None, data: dict[str, Any]) -> Any:
        """`compile(data)`, shared by every monitor of this class, data folder and settings
        (data files are read once per folder, and rules are never changed once compiled)."""
        key = (type(self), None if folder is None else str(folder), self.params.model_dump_json())
        with _COMPILED_RULES_LOCK:
            if key in _COMPILED_RULES:
                _COMPILED_RULES.move_to_end(key)
                return _COMPILED_RULES[key]
        rules = self.compile(data)  # outside the lock: two threads may both compile, alike
        with _COMPILED_RULES_LOCK:
            _COMPILED_RULES[key] = rules
            while len(_COMPILED_RULES) > COMPILED_RULES_KEPT:
                _COMPILED_RULES.popitem(last=False)
        return rules

    @property
    def can_fire(self) -> bool:
        return self.mode is not MonitorMode.LEARNING

    @property
    def fires_at(self) -> float:
        return self.alert_at

    @property
    def ladder(self) -> Ladder:
        """A monitor's ladder follows its mode (severity.toml `[monitor_ladders]`)."""
        modes = ladders_for_judging().monitor_modes
        return modes.get(self.mode.value) or Ladder.flat(Severity.LOW)

    # -- what each monitor implements ---------------------------------------------------
    def load_shared_data(self) -> None:
        """Compile the shared data (cached per folder) the monitor reads when judging, at
        construction: otherwise the first trace pays for it, and a broken file fails late."""

    def compile(self, data: dict[str, Any]) -> Any:
        """The monitor's rules from its data file (the `[monitor]` table is read already)."""
        return None

    def new_memory(self) -> Memory:
        raise NotImplementedError

    def read_trace(self, trajectory: Trajectory) -> Any:
        """What a monitor needs from the whole trace rather than one turn (its tool results,
        its time), read once per trace and handed to `observe` for each of its turns."""
        return None

    def observe(self, turn: AgentTurn, state: AgentState[Memory], trace: Any) -> list[Indicator]:
        """Judge one new turn of one agent and update its memory. `state.turns` counts the
        turns seen before this one; `trace` is what `read_trace` returned for its trace. In
        learning mode the indicators are kept, never fired."""
        raise NotImplementedError

    def summary(self, state: AgentState[Memory]) -> dict[str, Any]:
        """What the finding reports about one agent's baseline (details["agents"])."""
        return {}

    # -- shared ------------------------------------------------------------------------
    def judge(self, trajectory: Trajectory, analysis: TraceAnalysis) -> list[Assessment]:
        conversation = self.state.get(conversation_key(trajectory), ConversationState)
        with self.state.lock:
            if trajectory.trace_id in conversation.judged:  # a late span adds no turns
                return [_STORED.validate_json(conversation.judged[trajectory.trace_id])]
            found = self._judge_trace(trajectory, conversation)
            if found is None:
                return []
            # kept as JSON: a tenth of the objects' memory
            conversation.judged[trajectory.trace_id] = _STORED.dump_json(found)
            while len(conversation.judged) > JUDGED_TRACES:
                conversation.judged.popitem(last=False)
            return [found]

    def _judge_trace(
        self, trajectory: Trajectory, conversation: ConversationState[Memory]
    ) -> Assessment | None:
        indicators: list[Indicator] = []
        judged: dict[str, AgentState[Memory]] = {}
        trace = self.read_trace(trajectory)
        for turn in self._new_turns(agent_turns(trajectory), conversation):
            earlier = conversation.per_turn.pop(turn.digest, None)
            if earlier is None:
                found, judged[turn.agent] = self._take_turn(conversation, turn, trace)
            else:  # judged as it happened: reported here, not counted a second time
                found = _TURN_FOUND.validate_json(earlier)
                judged[turn.agent] = self._agent(conversation, turn.agent)
            indicators.extend(found)
        if not judged:
            return None
        return self._assessment(indicators, judged)

    def _take_turn(
        self, conversation: ConversationState[Memory], turn: AgentTurn, trace: Any
    ) -> tuple[list[Indicator], AgentState[Memory]]:
        """One new turn through its agent's memory: the step a trace and `process` share."""
        state = self._agent(conversation, turn.agent)
        found = []
        for indicator in self.observe(turn, state, trace):
            indicator.agent = indicator.agent or turn.agent
            indicator.span_id = indicator.span_id or turn.span_id
            found.append(indicator)
        state.turns += 1
        return found, state

    # -- per turn ------------------------------------------------------------------------
    def judge_turn(
        self,
        turn: AgentTurn,
        *,
        conversation: str | None = None,
        context: Trajectory | None = None,
    ) -> Finding:
        """This monitor's finding on one new turn, judged now with the conversation's
        memory (the same state a trace of that conversation builds). `context` is the run
        the turn belongs to (its tool results, inputs and time); without it the turn alone."""
        run = turn_trajectory(turn, conversation, context)
        conversation_state = self.state.get(conversation_key(run), ConversationState)
        with self.state.lock:
            conversation_state.seen[turn.digest] = None  # a trace replaying it later skips it
            while len(conversation_state.seen) > self.params.max_turns:
                conversation_state.seen.popitem(last=False)
            found, state = self._take_turn(conversation_state, turn, self.read_trace(run))
            kept = conversation_state.per_turn
            kept[turn.digest] = _TURN_FOUND.dump_json(found)
            kept.move_to_end(turn.digest)
            while len(kept) > PER_TURN_KEPT:
                kept.popitem(last=False)
            return self._finding(run, self._assessment(found, {turn.agent: state}))

    def process(
        self,
        turn: AgentTurn,
        *,
        conversation: str | None = None,
        context: Trajectory | None = None,
        policy: Policy | None = None,
        halts: HaltRegistry | None = None,
    ) -> TurnResult:
        """Judge one turn synchronously and say whether the agent must stop (`should_halt`:
        active mode and HARD_STOP under `policy`, the default safeguards policy when None).
        A halt is written to `halts` (the process's registry when None), where the guard
        finds it before the conversation's next tool call."""
        run = turn_trajectory(turn, conversation, context)
        finding = self.judge_turn(turn, conversation=conversation, context=run)
        return decide_turn(
            [finding], turn, conversation=run.conversation_id, policy=policy, halts=halts, run=run
        )

    def _new_turns(
        self, turns: list[AgentTurn], conversation: ConversationState[Memory]
    ) -> list[AgentTurn]:
        """The turns after the last one already counted (a trace re-sends the conversation so
        far, its own turns at the end), at most `max_turns`; each is remembered as counted.
        The last turn is always new: it is the answer the trace was made for, even when it
        repeats an earlier answer to the same question word for word.

        Scanning back from the end keeps this right when the history outgrows the memory of
        digests: a forgotten old turn sits before a remembered one and is not counted again.
        """
        seen = conversation.seen
        fresh: list[AgentTurn] = []
        for turn in reversed(turns):
            if (fresh and turn.digest in seen) or len(fresh) == self.params.max_turns:
                break
            fresh.append(turn)
        fresh.reverse()
        for turn in fresh:
            seen[turn.digest] = None
            while len(seen) > self.params.max_turns:
                seen.popitem(last=False)
        return fresh

    def _agent(self, conversation: ConversationState[Memory], agent: str) -> AgentState[Memory]:
        state = conversation.agents.pop(agent, None) or AgentState(self.new_memory())
        conversation.agents[agent] = state  # most recently active last
        while len(conversation.agents) > self.params.max_agents:
            conversation.agents.popitem(last=False)
        return state

    def _assessment(
        self, indicators: list[Indicator], agents: dict[str, AgentState[Memory]]
    ) -> Assessment:
        ranked = sorted(indicators, key=lambda i: i.severity, reverse=True)
        counts = Counter(i.type.value for i in ranked)
        score = ranked[0].severity if ranked else 0.0
        return Assessment(
            score,
            [i.as_evidence() for i in ranked[:MAX_EVIDENCE]],
            self._explain(ranked, self.fires(score)),
            span_id=ranked[0].span_id if ranked else None,
            details={
                "mode": self.mode.value,
                "sensitivity": self.params.sensitivity,
                "indicators": [i.as_dict() for i in ranked[:MAX_INDICATORS]],
                "indicator_counts": dict(counts),
                "agents": {
                    name: {"turns": state.turns, **self.summary(state)}
                    for name, state in agents.items()
                },
            },
        )

    def _explain(self, ranked: list[Indicator], detected: bool) -> str:
        if not ranked:
            return f"{self.mode.value} mode: nothing seen."
        kinds = ", ".join(dict.fromkeys(i.type.value for i in ranked))
        top = ranked[0]
        who = f" by {top.agent}" if top.agent else ""
        if self.mode is MonitorMode.LEARNING:
            return f"learning mode (never fires): {kinds}{who}, strongest {top.severity:.2f}."
        verdict = "fired" if detected else f"below the alert threshold {self.alert_at:.2f}"
        return f"{self.mode.value} mode, {verdict}: {kinds}{who}, strongest {top.severity:.2f}."


def _monitor_table(key: str, folder: str | None) -> dict[str, Any]:
    """The `[monitor]` settings: the user's file replaces the packaged values key by key. Data
    lists extend when merged, but a setting such as `enabled_checks = ["bias"]` must narrow."""
    settings = dict(load_data(key).get("monitor", {}))
    user = Path(folder) / f"{key}.toml" if folder else None
    if user is not None and user.is_file():
        settings.update(read_toml(str(user)).get("monitor", {}))
    return settings
