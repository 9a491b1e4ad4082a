"""The quality gate a detector's calibrated threshold must pass before it is used."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Gate:
    """Defaults: cross-validated F1 >= 0.80 and precision >= 0.70 on at least 30 labelled
    real traces, 10 of each class, and better than always firing: the F1 interval's lower
    bound must be above the always-fire F1, so a detector is not passed on a lucky draw.
    With a handful of one class (4 positives in 40 traces) every resample scores alike, and
    the interval ([1.00-1.00]) cannot show the noise it is there to show."""

    min_f1: float = 0.80
    min_precision: float = 0.70
    min_real_traces: int = 30
    min_per_class: int = 10
    beat_baseline: bool = True

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def judge(
        self,
        *,
        real_traces: int,
        f1: float | None,
        real_positives: int | None = None,
        precision: float | None,
        f1_low: float | None,
        baseline_f1: float | None,
    ) -> list[str]:
        """Why the detector fails the gate; an empty list means it passes."""
        reasons = []
        if real_traces < self.min_real_traces:
            reasons.append(
                f"{real_traces} labelled real trace(s), fewer than {self.min_real_traces}"
            )
        if real_positives is not None:
            fewest = min(real_positives, real_traces - real_positives)
            if fewest < self.min_per_class:
                which = "positive" if real_positives == fewest else "negative"
                reasons.append(
                    f"{fewest} {which} real trace(s), fewer than {self.min_per_class} of "
                    "each class: too few for the interval to show the sampling noise"
                )
        if f1 is None or precision is None:
            reasons.append("no cross-validated figures (each class needs at least 2 real rows)")
            return reasons
        if f1 < self.min_f1:
            reasons.append(f"F1 {f1:.3f} below {self.min_f1:.2f}")
        if precision < self.min_precision:
            reasons.append(f"precision {precision:.3f} below {self.min_precision:.2f}")
        if self.beat_baseline and baseline_f1 is not None and (f1_low or 0.0) <= baseline_f1:
            reasons.append(
                f"not better than always firing (F1 lower bound {f1_low or 0.0:.3f} <= "
                f"always-fire F1 {baseline_f1:.3f})"
            )
        return reasons
