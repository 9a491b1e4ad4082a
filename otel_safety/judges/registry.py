"""The judges in use: the packaged ones, or others put in place for one block of work.

Detectors ask `judge(name)` at the moment they judge, so the out-of-sample evaluation can
put in place judges fitted without the group being scored (`using`). Retrained judges
(`make judges`) are written over the packaged files.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path

from otel_safety.analysis.memo import content_memo
from otel_safety.judges.definitions import DEFINITIONS
from otel_safety.judges.model import LinearJudge, load_judge

__all__ = ["PACKAGED", "Verdict", "ask", "judge", "judge_detail", "using"]

PACKAGED = Path(__file__).parent / "weights"
_override: ContextVar[Mapping[str, LinearJudge | None] | None] = ContextVar(
    "otel_safety_judges", default=None
)


@functools.cache
def _load(name: str) -> LinearJudge | None:
    path = PACKAGED / f"{name}.json"
    return load_judge(path) if path.is_file() else None


def judge(name: str) -> LinearJudge | None:
    """The judge called `name` in use now, or None when none is installed."""
    override = _override.get()
    if override is not None and name in override:
        return override[name]
    return _load(name)


@contextmanager
def using(judges: Mapping[str, LinearJudge | None]) -> Iterator[None]:
    """Judge with these judges (by name; None: none, so the rules decide) until the block
    ends."""
    token = _override.set(judges)
    try:
        yield
    finally:
        _override.reset(token)


@dataclass(frozen=True)
class Verdict:
    """A judge's probability and the sentence that pushed it furthest that way."""

    probability: float
    sentence: str
    judge: str
    version: str


def ask(name: str, evidence_field: str = "answer", **fields: str) -> Verdict | None:
    """What judge `name` makes of these fields (None when it is not installed)."""
    learned = judge(name)
    if learned is None:
        return None
    return _ask(learned, name, evidence_field, tuple(sorted(fields.items())))


@content_memo
def _ask(
    learned: LinearJudge, name: str, evidence_field: str, items: tuple[tuple[str, str], ...]
) -> Verdict:
    fields = dict(items)
    probability = learned.probability(fields, DEFINITIONS[name].rules(fields))
    sign = 1.0 if probability >= 0.5 else -1.0
    sentence = learned.strongest_sentence(evidence_field, fields.get(evidence_field, ""), sign)
    return Verdict(probability, sentence, learned.name, learned.version)


def judge_detail(verdict: Verdict | None) -> dict[str, object]:
    """What a finding's evidence records of a judge's verdict (nothing without one)."""
    if verdict is None:
        return {}
    return {
        "judge": f"{verdict.judge}@{verdict.version}",
        "probability": round(verdict.probability, 3),
    }
