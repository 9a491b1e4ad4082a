"""Which traces get a deep analysis: the uncertain and the serious, within a budget.

A trace is a candidate when its first verdict reached one of the configured levels, when a
configured detector fired on it, or when a finding's score sits within `deep_uncertainty`
of its threshold (the rules could have gone either way). Candidates are then sampled and
held to a per-minute budget of traces and of model tokens; every skip is counted.
"""

from __future__ import annotations

import random
import threading
import time
from collections import deque
from collections.abc import Callable

from otel_safety.config import Settings
from otel_safety.model import EscalationLevel
from otel_safety.pipeline import TraceEvaluation
from otel_safety.policies.signals import finding_signals

WINDOW = 60.0  # seconds of the per-minute budgets
UNCERTAIN_SIGNAL = 0.4  # a finding's own uncertainty signal at the safeguards table's cut-off


class Selector:
    """Thread-safe: the engine's thread asks `why`/`admit`, the workers report tokens."""

    def __init__(
        self,
        settings: Settings,
        *,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        self.levels = {EscalationLevel.parse(level) for level in settings.deep_levels}
        self.detectors = set(settings.deep_detectors)
        self.uncertainty = settings.deep_uncertainty
        self.sample_rate = settings.deep_sample_rate
        self.per_minute = settings.deep_per_minute
        self.tokens_per_minute = settings.deep_tokens_per_minute
        self._clock = clock
        self._rng = rng or random.Random()
        self._lock = threading.Lock()
        self._admitted: deque[float] = deque()
        self._spent: deque[tuple[float, int]] = deque()
        self._spent_total = 0

    def why(self, evaluation: TraceEvaluation) -> str | None:
        """Why this trace needs a deep analysis, or None when it does not."""
        if evaluation.trajectory is None or evaluation.error is not None:
            return None
        if evaluation.level in self.levels:
            return f"level {evaluation.level.name}"
        fired = sorted({f.detector for f in evaluation.findings if f.detected} & self.detectors)
        if fired:
            return f"detector {fired[0]}"
        band = self.uncertainty
        for finding in evaluation.findings:
            if band and finding.score > 0 and abs(finding.score - finding.threshold) <= band:
                return f"uncertain {finding.detector}"
            carries = finding.details is not None and "signals" in finding.details
            if carries and finding_signals(finding).uncertainty >= UNCERTAIN_SIGNAL:
                return f"uncertain {finding.detector}"
        return None

    def admit(self) -> str | None:
        """None when a candidate may go now, else the budget that stops it."""
        if self.sample_rate < 1 and self._rng.random() >= self.sample_rate:
            return "sampled_out"
        with self._lock:
            now = self._clock()
            self._expire(now)
            if self.per_minute and len(self._admitted) >= self.per_minute:
                return "over_budget"
            if self.tokens_per_minute and self._spent_total >= self.tokens_per_minute:
                return "over_token_budget"
            self._admitted.append(now)
        return None

    def refund(self) -> None:
        """Give back the last admission (its trace was dropped before the model saw it)."""
        with self._lock:
            if self._admitted:
                self._admitted.pop()

    def spent(self, tokens: int) -> None:
        """Tokens a finished analysis used, charged to the current minute."""
        if tokens <= 0:
            return
        with self._lock:
            self._spent.append((self._clock(), tokens))
            self._spent_total += tokens

    def _expire(self, now: float) -> None:
        while self._admitted and now - self._admitted[0] >= WINDOW:
            self._admitted.popleft()
        while self._spent and now - self._spent[0][0] >= WINDOW:
            self._spent_total -= self._spent.popleft()[1]
