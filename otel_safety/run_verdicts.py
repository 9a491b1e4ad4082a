"""What the earlier parts of each recent trace were judged, so a later part carries its run's
verdict.

A run can reach the engine in parts: spans that end after their trace was released (a pause
longer than the decision wait, a flush, an exporter's later batch) are judged as a part of
their own. When the part without the root is judged first (HARD_STOP, say) and the root's
part later, alone (NONE), the root span would carry NONE, and a tail sampler that keeps runs
by their root span's level would drop the run. The engine remembers, for its recent traces,
the strictest level and the detectors fired so far, and raises each later part to them
before the sinks see it. The store folds the parts' rows into one the same way
(`exporters/trace_fragments.py`).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING

from otel_safety.annotate import with_run_verdict
from otel_safety.model import EscalationLevel

if TYPE_CHECKING:
    from otel_safety.pipeline import TraceEvaluation

__all__ = ["RunVerdict", "RunVerdicts"]


@dataclass(frozen=True)
class RunVerdict:
    """A run's verdict over the parts of it judged so far."""

    level: EscalationLevel
    fired: tuple[str, ...]  # detectors fired by any part, first seen first
    strongest_finding: EscalationLevel  # the highest level any finding set on its own

    @property
    def by_policy(self) -> bool:
        """The policy, not a finding, explains the level (as `policy.raised_by_policy`)."""
        return self.level > self.strongest_finding

    def joined(self, other: RunVerdict) -> RunVerdict:
        return RunVerdict(
            max(self.level, other.level),
            tuple(dict.fromkeys((*self.fired, *other.fired))),
            max(self.strongest_finding, other.strongest_finding),
        )


def part_verdict(evaluation: TraceEvaluation) -> RunVerdict:
    """The verdict of one judged part on its own."""
    fired = [finding for finding in evaluation.findings if finding.detected]
    return RunVerdict(
        evaluation.level,
        tuple(dict.fromkeys(finding.detector for finding in fired)),
        max((finding.escalation for finding in evaluation.findings), default=EscalationLevel.NONE),
    )


class RunVerdicts:
    """The verdicts of the last `max_traces` traces judged, by trace id."""

    def __init__(self, max_traces: int = 10_000) -> None:
        self._max_traces = max_traces
        self._runs: OrderedDict[str, RunVerdict] = OrderedDict()
        self._lock = threading.Lock()

    def carry(self, evaluation: TraceEvaluation) -> bool:
        """Raise `evaluation` to its run's verdict where earlier parts were stricter (or fired
        other detectors), and remember the run's. True when the part was raised."""
        own = part_verdict(evaluation)
        with self._lock:
            earlier = self._runs.pop(evaluation.trace_id, None)
            run = own if earlier is None else earlier.joined(own)
            if earlier is not None or evaluation.trajectory is not None:
                self._runs[evaluation.trace_id] = run
                while len(self._runs) > self._max_traces:
                    self._runs.popitem(last=False)
        if run.level == own.level and set(run.fired) == set(own.fired):
            return False
        evaluation.run = run
        evaluation.level = run.level
        evaluation.spans = with_run_verdict(
            evaluation.spans, run.level, run.fired, run.by_policy, evaluation.reason
        )
        return True
