"""Severity ladders: what a finding's score means to a reviewer, read from `severity.toml`.

A ladder lives in data, not in a detector's code, so a deployment can raise a detector's
severity at a score without forking it, and one rule (`Ladder.at`) reads every ladder.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from otel_safety.analysis.patterns.datafiles import current_data_dir, load_compiled
from otel_safety.model import Severity

__all__ = [
    "Ladder",
    "Ladders",
    "current_ladders",
    "ladders_for_judging",
    "load_ladders",
    "strictest",
]

logger = logging.getLogger(__name__)

_RANK = {severity: rank for rank, severity in enumerate(Severity)}


@dataclass(frozen=True)
class Ladder:
    """Steps (from_score, severity): a score takes the strictest severity it reaches."""

    steps: tuple[tuple[float, Severity], ...]

    @classmethod
    def flat(cls, severity: Severity) -> Ladder:
        return cls(((0.0, severity),))

    def at(self, score: float) -> Severity:
        return strictest(severity for start, severity in self.steps if score >= start)

    def describe(self) -> str:
        """`low, medium from 0.5, high from 0.8`: the ladder as `otel-safety detectors` shows it."""
        ordered = sorted(self.steps, key=lambda step: (step[0], _RANK[step[1]]))
        return ", ".join(
            severity.value if start == 0.0 else f"{severity.value} from {start:g}"
            for start, severity in ordered
        )


def strictest(severities: Iterable[Severity]) -> Severity:
    """The strictest of some severities; low when there are none."""
    return max(severities, key=_RANK.__getitem__, default=Severity.LOW)


@dataclass(frozen=True)
class Ladders:
    """Every ladder in force: one per detector key, one per behaviour-monitor mode."""

    detectors: Mapping[str, Ladder]
    monitor_modes: Mapping[str, Ladder]


@functools.cache  # per data folder, as every detector's data
def load_ladders(data_dir: str | None = None) -> Ladders:
    return load_compiled("severity", _compile, "severity ladders", data_dir=data_dir)


def current_ladders() -> Ladders:
    """The ladders in force: packaged, plus `severity.toml` in OTEL_SAFETY_DATA_DIR; a
    ValueError naming the file when that does not load (commands check it at start-up)."""
    return load_ladders(current_data_dir())


_broken: dict[str | None, Ladders] = {}  # data folders whose severity.toml did not load


def ladders_for_judging() -> Ladders:
    """The ladders in force, or, when the data folder's file does not load, the packaged
    ones, logged once: an app's findings still get a severity."""
    folder = current_data_dir()
    fallback = _broken.get(folder)
    if fallback is not None:
        return fallback
    try:
        return load_ladders(folder)
    except ValueError as exc:
        logger.error("otel-safety %s; the packaged severity ladders are used", exc)
        _broken[folder] = load_ladders(None)
        return _broken[folder]


def _compile(data: Mapping[str, Any]) -> Ladders:
    return Ladders(
        detectors=_table(data.get("ladders", {}), "ladders"),
        monitor_modes=_table(data.get("monitor_ladders", {}), "monitor_ladders"),
    )


def _table(table: Any, where: str) -> dict[str, Ladder]:
    if not isinstance(table, Mapping):
        raise ValueError(f"[{where}] must be a table of ladders")
    return {key: _ladder(steps, f"{where}.{key}") for key, steps in table.items()}


def _ladder(steps: Any, where: str) -> Ladder:
    if not isinstance(steps, list) or not steps:
        raise ValueError(f"{where} must be a list of [from_score, severity] steps")
    parsed = []
    for step in steps:
        if not (isinstance(step, list) and len(step) == 2 and isinstance(step[0], int | float)):
            raise ValueError(f"{where}: step {step!r} is not [from_score, severity]")
        start, name = step
        if not 0.0 <= start <= 1.0:
            raise ValueError(f"{where}: step {step!r} starts outside [0, 1]")
        try:
            parsed.append((float(start), Severity(str(name).lower())))
        except ValueError:
            names = ", ".join(s.value for s in Severity)
            raise ValueError(f"{where}: unknown severity {name!r}; use one of {names}") from None
    return Ladder(tuple(parsed))
