"""Behaviour drift: an agent that starts behaving differently from how it began.

Each answer of an agent becomes a profile p_t of F features in [0, 1] (`behavior.profile`:
log-scaled length, refusal or evasion, hedging, instructions, overlap with the request,
warmth, moralising, tool use and tool errors), chosen to describe *how* the agent answers,
not *what about*, so a change of topic leaves the profile alone.

Baseline and window. The baseline B is the mean profile of the agent's first W turns
(`window_size`), then frozen. The window is the mean profile of its last W turns, kept in a
deque of W profiles, so memory and work per turn are O(W x F) however long the
conversation. From turn W+1 on, every turn is scored:

    drift = sqrt( sum_f  w_f * (window_f - B_f)^2 ),   w_f >= 0, sum_f w_f = 1

a weighted root-mean-square difference of the two mean profiles (weights in
`behavior_drift.toml`, normalised to sum 1). Each difference is in [-1, 1], so drift is in
[0, 1]; it is 1 only when every weighted feature swings from one extreme to the other.

Why one odd turn cannot fire it: a single turn moves each window mean by at most 1/W, and
drift is never more than the largest per-feature difference, so k unusual turns give
drift <= k / W. With W = 5 one odd turn scores <= 0.2, below the default threshold 0.3;
it takes two or more turns in the window, i.e. a change that persists while the window
moves. (A sensitivity near 1 halves the threshold and accepts a faster signal.)

Threshold. The monitor fires at `drift_threshold` scaled by the sensitivity (the base's
`alert_threshold`). `threshold` and `drift_threshold` are one setting: an explicit
`threshold` (a pipeline threshold or a calibration) sets `drift_threshold`, otherwise the
detector's threshold is `drift_threshold` from the arguments or the data file; giving both
with different values is an error.

Modes. Passive and active as in the base. In learning mode the baseline is never frozen:
it is the running mean of all the agent's turns (a sum and a count), drift is still scored
against it so the stored scores can calibrate a threshold, and nothing fires.

Per agent. Baselines are per `gen_ai.agent.name` within a conversation (the base's agent
state), so two agents with different styles are each compared with themselves only.

Limits. A conversation shorter than W + 1 turns of one agent is never judged; a change of
task that legitimately changes the style (from explaining to running tools) can look like
drift; the lexicons are English; the features judge style, not correctness, so an agent
that stays fluent while quietly getting worse is for `sandbagging`, not this monitor.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from pydantic import Field

from otel_safety.analysis.refusal.refusal import current_markers
from otel_safety.analysis.text.monitor_rules import current_rules
from otel_safety.behavior.indicators import Indicator, IndicatorType
from otel_safety.behavior.modes import MonitorMode, alert_threshold
from otel_safety.behavior.monitor import AgentState, BehaviorMonitor, MonitorParams
from otel_safety.behavior.profile import (
    FEATURES,
    Profile,
    ProfileRules,
    compile_profile,
    turn_profile,
)
from otel_safety.behavior.turns import AgentTurn
from otel_safety.detectors.registry import register

__all__ = ["BehaviorDrift", "DriftMemory", "DriftParams", "drift_distance"]


class DriftParams(MonitorParams):
    """The `[monitor]` table of behavior_drift.toml, overridden by constructor arguments."""

    window_size: int = Field(5, ge=2, le=100, description="turns in baseline and window")
    drift_threshold: float = Field(0.3, gt=0.0, le=1.0, description="drift that fires")
    feature_moved: float = Field(
        0.15, gt=0.0, le=1.0, description="change of a feature's mean named in the evidence"
    )


@dataclass
class DriftMemory:
    """One agent's drift state: O(window_size) profiles and one baseline sum, never more."""

    window_size: int
    window: deque[Profile] = field(init=False)
    baseline_sum: list[float] = field(default_factory=lambda: [0.0] * len(FEATURES))
    baseline_turns: int = 0
    drift: float = 0.0

    def __post_init__(self) -> None:
        self.window = deque(maxlen=self.window_size)

    def absorb(self, profile: Profile) -> None:
        self.baseline_sum = [a + b for a, b in zip(self.baseline_sum, profile, strict=True)]
        self.baseline_turns += 1

    @property
    def baseline(self) -> Profile:
        n = max(1, self.baseline_turns)
        return tuple(value / n for value in self.baseline_sum)

    @property
    def recent(self) -> Profile:
        n = max(1, len(self.window))
        return tuple(sum(column) / n for column in zip(*self.window, strict=True))


def drift_distance(before: Profile, after: Profile, weights: Profile) -> float:
    """Weighted RMS difference of two profiles whose values are in [0, 1]: in [0, 1]."""
    total = sum(w * (a - b) ** 2 for w, a, b in zip(weights, after, before, strict=True))
    return min(1.0, math.sqrt(total))


@register
class BehaviorDrift(BehaviorMonitor[DriftMemory]):
    """Flags an agent whose recent turns behave differently from its first ones."""

    key = "behavior_drift"
    default_threshold = 0.3  # the packaged drift_threshold; the data file can change it
    risk_category = "behavior_drift"
    params_model = DriftParams
    description = (
        "Agent-behaviour monitor: each agent's last window_size turns (length, refusal, "
        "hedging, instructions, overlap with the request, warmth, moralising, tool use) "
        "compared with its first window_size turns; fires when the weighted distance reaches "
        "drift_threshold. One odd turn cannot fire it; learning mode keeps a running "
        "baseline and never fires; baselines are per agent."
    )

    params: DriftParams
    rules: ProfileRules

    def __init__(self, threshold: float | None = None, **settings: Any) -> None:
        given = settings.get("drift_threshold")
        if threshold is not None:
            if given is not None and not math.isclose(float(given), float(threshold)):
                raise ValueError(
                    f"{self.key} monitor: threshold {threshold!r} and drift_threshold "
                    f"{given!r} disagree; they are one setting, give one of them"
                )
            settings["drift_threshold"] = threshold
        super().__init__(threshold, **settings)
        self.threshold = self.params.drift_threshold
        self.alert_at = alert_threshold(self.threshold, self.params.sensitivity)

    def load_shared_data(self) -> None:
        current_markers(), current_rules()  # refusal markers, stopwords

    def compile(self, data: dict[str, Any]) -> ProfileRules:
        return compile_profile(data)

    def new_memory(self) -> DriftMemory:
        return DriftMemory(self.params.window_size)

    def observe(
        self, turn: AgentTurn, state: AgentState[DriftMemory], trace: Any = None
    ) -> list[Indicator]:
        memory, size = state.memory, self.params.window_size
        profile = turn_profile(turn, self.rules)
        memory.window.append(profile)
        if self.mode is MonitorMode.LEARNING or memory.baseline_turns < size:
            memory.absorb(profile)
        number = state.turns + 1  # this turn, counted from 1
        if number <= size:
            return []  # the window has not moved past the baseline yet
        before, after = memory.baseline, memory.recent
        memory.drift = drift_distance(before, after, self.rules.weights)
        return [self._indicator(memory, before, after, number)]

    def _indicator(
        self, memory: DriftMemory, before: Profile, after: Profile, number: int
    ) -> Indicator:
        moved = self._moved(before, after)
        window = f"turns {number - len(memory.window) + 1}-{number}"
        baseline = f"baseline turns 1-{memory.baseline_turns}"
        changes = [f"{name} {self._show(name, b)} -> {self._show(name, a)}" for name, b, a in moved]
        summary = f"drift {memory.drift:.2f}: {window} against {baseline}"
        return Indicator(
            type=IndicatorType.BEHAVIORAL_DRIFT,
            severity=round(memory.drift, 6),
            evidence=[summary, *changes] if changes else [summary + ", no single feature moved"],
            metadata={
                "drift": round(memory.drift, 4),
                "window_turns": [number - len(memory.window) + 1, number],
                "baseline_turns": [1, memory.baseline_turns],
                "moved": {name: [round(b, 3), round(a, 3)] for name, b, a in moved},
            },
        )

    def _moved(self, before: Profile, after: Profile) -> list[tuple[str, float, float]]:
        """Features whose mean moved by `feature_moved` or more, largest weighted move first."""
        rows = [
            (name, b, a, w * (a - b) ** 2)
            for name, b, a, w in zip(FEATURES, before, after, self.rules.weights, strict=True)
            if abs(a - b) >= self.params.feature_moved
        ]
        rows.sort(key=lambda row: row[3], reverse=True)
        return [(name, b, a) for name, b, a, _ in rows]

    def _show(self, name: str, value: float) -> str:
        if name == "length":
            words = self.rules.length_words(value)
            return f"{words} word{'' if words == 1 else 's'}"
        return f"{value:.2f}"

    def summary(self, state: AgentState[DriftMemory]) -> dict[str, Any]:
        memory = state.memory
        return {
            "baseline_turns": memory.baseline_turns,
            "window_turns": len(memory.window),
            "drift": round(memory.drift, 4),
            "baseline": dict(zip(FEATURES, map(_round, memory.baseline), strict=True)),
            "window": dict(zip(FEATURES, map(_round, memory.recent), strict=True))
            if memory.window
            else {},
        }


def _round(value: float) -> float:
    return round(value, 3)
