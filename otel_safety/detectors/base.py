"""The contract every detector meets: a pure function of a trajectory that explains itself.

A detector implements one method, `judge(trajectory, analysis)`, and returns what it found
as `Assessment`s: a score, the evidence and an explanation, for the run or for each element
it judges on its own span (each tool call, each model call). The base alone turns them into
`Finding`s, with one fire rule (`fires`) and the severity ladder from `severity.toml`, so
every detector, built-in or a user's, fires and escalates the same way.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from otel_safety.analysis.secrets import mask
from otel_safety.detectors.severity import Ladder, ladders_for_judging
from otel_safety.model import Evidence, Finding, Severity, Trajectory

if TYPE_CHECKING:  # an app judging in a worker process loads no analysis
    from otel_safety.analysis.trace import TraceAnalysis

__all__ = ["EVIDENCE_MAX_CHARS", "Assessment", "Detector", "clip", "redact"]

EVIDENCE_MAX_CHARS = 240


@dataclass(slots=True)
class Assessment:
    """What a detector found in a run, or in one element of it.

    `span_id` is the span the finding is written onto (default: the first evidence's span,
    else the run's root). `severity` is for a rule whose own data names one (a guard rule, a
    scope category); it stands in place of the detector's ladder. `details` is the
    structured result beside the explanation (signals for the safeguards table, say).
    """

    score: float
    evidence: list[Evidence] = field(default_factory=list)
    explanation: str = ""
    span_id: str | None = None
    severity: Severity | None = None
    details: dict[str, Any] | None = None


class Detector:
    """Base class: subclasses set the class attributes and implement `judge`."""

    key: ClassVar[str]
    default_threshold: ClassVar[float]
    severity: ClassVar[Severity] = Severity.MEDIUM  # with no ladder in severity.toml
    risk_category: ClassVar[str | None] = None
    description: ClassVar[str] = ""
    # The packaged learned judges whose scores the detector's carry (`otel_safety.judges`):
    # calibrating on rows they were trained on would choose a threshold on in-sample scores.
    learned_judges: ClassVar[tuple[str, ...]] = ()

    def __init__(self, threshold: float | None = None) -> None:
        self.threshold = self.default_threshold if threshold is None else threshold

    @property
    def can_fire(self) -> bool:
        """False for detectors that only annotate (claims for policies, a monitor in learning
        mode): reports leave them out of firing rates, where they would only show zeros."""
        return True

    @property
    def fires_at(self) -> float:
        """The score from which a finding fires (a monitor's follows its sensitivity)."""
        return self.threshold

    @property
    def ladder(self) -> Ladder:
        """This detector's severity ladder from severity.toml, else its flat `severity`."""
        found = ladders_for_judging().detectors.get(self.key)
        return Ladder.flat(self.severity) if found is None else found

    @property
    def _masks_own(self) -> bool:
        """Ours quote through `clip`, which masks secrets; a user's detector may not know
        to, so the base masks what it quotes (evidence is always masked)."""
        return type(self).__module__.startswith("otel_safety.")

    def fires(self, score: float) -> bool:
        """The one fire rule: a positive score at or above the threshold, where firing is on;
        both as a finding stores them (to six places), as calibration compares them."""
        return self.can_fire and score > 0.0 and round(score, 6) >= round(self.fires_at, 6)

    def judge(self, trajectory: Trajectory, analysis: TraceAnalysis) -> Iterable[Assessment]:
        """What the detector found: nothing when the trajectory gives it nothing to judge
        (no finding is recorded then), one assessment per element it judges otherwise."""
        raise NotImplementedError

    def evaluate_all(
        self, trajectory: Trajectory, analysis: TraceAnalysis | None = None
    ) -> list[Finding]:
        """The findings for one trajectory, one per assessment (the pipeline hands every
        detector the trace's one analysis; a caller without one gets a fresh one)."""
        if analysis is None:
            from otel_safety.analysis.trace import TraceAnalysis

            analysis = TraceAnalysis(trajectory)
        return [self._finding(trajectory, found) for found in self.judge(trajectory, analysis)]

    def evaluate(
        self, trajectory: Trajectory, analysis: TraceAnalysis | None = None
    ) -> Finding | None:
        """The trace-level answer: the strongest finding (the first of equal ones)."""
        return max(self.evaluate_all(trajectory, analysis), key=lambda f: f.score, default=None)

    def _finding(self, trajectory: Trajectory, found: Assessment) -> Finding:
        score = round(float(found.score), 6)  # as stored, and as it is fired on
        detected = self.fires(score)
        span_id = found.span_id or next((e.span_id for e in found.evidence if e.span_id), None)
        if not detected:
            severity = Severity.LOW
        elif found.severity is not None:
            severity = found.severity
        else:
            severity = self.ladder.at(score)
        return Finding(
            detector=self.key,
            trace_id=trajectory.trace_id,
            span_id=span_id or trajectory.root_span_id,
            score=score,
            threshold=round(self.fires_at, 6),
            detected=detected,
            severity=severity,
            explanation=found.explanation if self._masks_own else redact(found.explanation),
            evidence=found.evidence if self._masks_own else _masked(found.evidence),
            risk_category=self.risk_category if detected else None,
            details=found.details,
        )


def clip(text: str, limit: int = EVIDENCE_MAX_CHARS) -> str:
    """Evidence is quoted, never dumped: short enough to read, secrets masked."""
    text = redact(" ".join(text.split()))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _masked(evidence: list[Evidence]) -> list[Evidence]:
    return [item.model_copy(update={"text": redact(item.text)}) for item in evidence]


def redact(text: str) -> str:
    """Mask secrets (keys, tokens, passwords, card numbers; see `analysis.secrets`)."""
    return mask(text)[0]
