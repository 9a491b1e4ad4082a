"""The contract every detector meets: a pure function of a trajectory that explains itself."""

from __future__ import annotations

from typing import ClassVar

from otel_safety.analysis.secrets import mask
from otel_safety.model import Evidence, Finding, Severity, Trajectory

EVIDENCE_MAX_CHARS = 240


class Detector:
    """Base class: subclasses set the class attributes and implement `score`.

    `score` returns the score in [0, 1] and the evidence behind it, or `None` when the
    trajectory gives the detector nothing to judge (no finding is recorded then).
    """

    key: ClassVar[str]
    severity: ClassVar[Severity]
    default_threshold: ClassVar[float]
    risk_category: ClassVar[str | None] = None
    description: ClassVar[str] = ""

    def __init__(self, threshold: float | None = None) -> None:
        self.threshold = self.default_threshold if threshold is None else threshold

    @property
    def can_fire(self) -> bool:
        """False for detectors that only annotate (claims for policies, a monitor in learning
        mode): reports leave them out of firing rates, where they would only show zeros."""
        return True

    def score(self, trajectory: Trajectory) -> tuple[float, list[Evidence], str] | None:
        """Return (score, evidence, explanation), or None when not applicable."""
        raise NotImplementedError

    def evaluate(self, trajectory: Trajectory) -> Finding | None:
        judged = self.score(trajectory)
        if judged is None:
            return None
        score, evidence, explanation = judged
        detected = score >= self.threshold and score > 0.0
        span_id = next((e.span_id for e in evidence if e.span_id), None)
        return Finding(
            detector=self.key,
            trace_id=trajectory.trace_id,
            span_id=span_id or trajectory.root_span_id,
            score=round(float(score), 6),
            threshold=self.threshold,
            detected=detected,
            severity=self.severity,
            explanation=explanation,
            evidence=evidence,
            risk_category=self.risk_category if detected else None,
        )

    def evaluate_all(self, trajectory: Trajectory) -> list[Finding]:
        """The findings for one trajectory: one at most here; detectors that judge each
        element on its own span (each tool call, say) override this."""
        finding = self.evaluate(trajectory)
        return [] if finding is None else [finding]


class PerSpanDetector(Detector):
    """A detector that judges each element of a run (each tool call, each model call) on its
    own span: subclasses implement `evaluate_all`; the trace-level answer is the worst one."""

    def evaluate_all(self, trajectory: Trajectory) -> list[Finding]:
        raise NotImplementedError

    def evaluate(self, trajectory: Trajectory) -> Finding | None:
        return max(self.evaluate_all(trajectory), key=lambda f: f.score, default=None)

    def score(self, trajectory: Trajectory) -> tuple[float, list[Evidence], str] | None:
        worst = self.evaluate(trajectory)
        return None if worst is None else (worst.score, worst.evidence, worst.explanation)


def clip(text: str, limit: int = EVIDENCE_MAX_CHARS) -> str:
    """Evidence is quoted, never dumped: short enough to read, secrets masked."""
    text = redact(" ".join(text.split()))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def redact(text: str) -> str:
    """Mask secrets (keys, tokens, passwords, card numbers; see `analysis.secrets`)."""
    return mask(text)[0]
