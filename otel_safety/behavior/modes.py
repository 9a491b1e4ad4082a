"""What a behaviour monitor may do with what it sees, and how readily it speaks up."""

from __future__ import annotations

from enum import StrEnum

__all__ = ["MonitorMode", "alert_threshold"]


class MonitorMode(StrEnum):
    """`passive` annotates (its findings raise a trace to WARN at most); `active` may raise
    it to a stop (each mode's severities are in `severity.toml`); `learning` builds its
    baselines and never fires (scores are still stored, so thresholds can be calibrated on
    them before switching the monitor on)."""

    PASSIVE = "passive"
    ACTIVE = "active"
    LEARNING = "learning"

    @classmethod
    def parse(cls, value: MonitorMode | str) -> MonitorMode:
        try:
            return cls(str(value).strip().lower())
        except ValueError:
            names = ", ".join(m.value for m in cls)
            raise ValueError(f"unknown monitor mode {value!r}; one of: {names}") from None


def alert_threshold(threshold: float, sensitivity: float) -> float:
    """The threshold a monitor fires at: 0.5 sensitivity leaves it as it is, 1 halves it,
    0 raises it by half (the adaptive policy scales its cut-offs the same way)."""
    if not 0.0 <= sensitivity <= 1.0:
        raise ValueError(f"sensitivity must be between 0 and 1, got {sensitivity!r}")
    return min(1.0, threshold * (1.5 - sensitivity))
