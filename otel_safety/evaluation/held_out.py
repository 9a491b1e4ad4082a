"""Judges fitted without the group being scored, for `otel-safety eval`'s out-of-sample run.

A case belongs to a fold: one model's answers on one dataset (XSTest and JailbreakBench by
model, AgentDojo by model run), one category of AgentHarm's tasks, or its whole dataset
otherwise. Before a fold is judged,
each learned judge is refitted on its training rows minus that fold's (its group, or its
whole dataset for judges of requests, see `JudgeDefinition.holdout`); a judge none of whose
rows belong to the fold is the packaged one, which never saw the fold either.
"""

from __future__ import annotations

import importlib.util
from collections import Counter
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

from otel_safety.evaluation.cases import Case
from otel_safety.evaluation.datasets import DataError
from otel_safety.judges.corpus import Example, examples
from otel_safety.judges.definitions import DEFINITIONS
from otel_safety.judges.model import LinearJudge
from otel_safety.judges.registry import judge
from otel_safety.judges.train import design, fit, holdout_key

__all__ = ["HeldOutJudges", "fold_of", "origin", "training_available"]


def training_available() -> bool:
    """Whether scikit-learn (the `train` extra) is installed, to refit judges."""
    return importlib.util.find_spec("sklearn") is not None


def fold_of(case: Case) -> str:
    """The group a case is held out with (matches `judges.corpus` groups)."""
    if case.dataset == "xstest":
        return f"xstest:{case.case_id.split(':')[1]}"
    dataset = origin(case)
    if dataset in ("jailbreakbench", "agentdojo") and case.meta.get("model"):
        return f"{dataset}:{case.meta['model']}"
    if case.dataset == "agentharm" and case.meta.get("category"):
        return f"agentharm:{case.meta['category']}"
    return case.dataset


def origin(case: Case) -> str:
    """The dataset a case's rows come from: a set built from another (AgentDojo's runs with
    other attack strings) is held out with it, so no judge fitted on those runs scores it."""
    return case.meta.get("derived_from") or case.dataset


class HeldOutJudges:
    """Per fold, the judges that never saw it (fitted on demand, cached)."""

    def __init__(self, root: Path, progress: Callable[[str], None] | None = None) -> None:
        self._root = root
        self._progress = progress
        self._rows: dict[str, list[Example]] = {}
        self._designs: dict[str, Any] = {}
        self._fitted: dict[tuple[str, str], LinearJudge] = {}

    def check_training_rows(self) -> None:
        """Raise DataError unless the data folder holds every row each packaged judge was
        fitted on (its card's `trained_on`). A folder with some datasets only would refit a
        judge on fewer rows, one the figures do not describe, or fail after the first pass."""
        for name in DEFINITIONS:
            packaged = judge(name)
            if packaged is None:
                continue
            if name not in self._rows:
                self._rows[name] = examples(name, self._root)
            read = Counter(row.group for row in self._rows[name])
            trained_on = packaged.card.get("trained_on") or {}
            short = sorted(group for group, rows in trained_on.items() if read[group] < rows)
            if short:
                listed = ", ".join(short[:4]) + (
                    f" and {len(short) - 4} more" if len(short) > 4 else ""
                )
                raise DataError(
                    f"cannot refit the {name} judge for the out-of-sample figures: {self._root} "
                    f"lacks rows it was fitted on ({listed}); point --data at the whole "
                    "labelled data folder, or pass --in-sample"
                )

    def for_fold(
        self, fold: str, dataset: str, used: Collection[str] | None = None
    ) -> dict[str, LinearJudge]:
        """`used`: the judges the run's detectors ask (None: all); the others stay the
        packaged ones, as refitting a judge nobody asks costs time and changes nothing."""
        judges = {}
        for name, definition in DEFINITIONS.items():
            packaged = judge(name)
            if packaged is None:
                continue  # a judge that is not installed is not used
            if used is not None and name not in used:
                judges[name] = packaged
                continue
            if name not in self._rows:
                self._rows[name] = examples(name, self._root)
            rows = self._rows[name]
            unit = fold if definition.holdout == "group" else dataset
            kept = [i for i, row in enumerate(rows) if holdout_key(definition, row) != unit]
            if len(kept) == len(rows):
                judges[name] = packaged
                continue
            if (name, unit) not in self._fitted:
                if self._progress:
                    self._progress(f"eval: fitting {name} without {unit} ({len(kept)} rows)")
                if name not in self._designs:  # every row's features, worked out once
                    self._designs[name] = design(definition, rows)
                self._fitted[(name, unit)] = fit(
                    definition, rows, picked=kept, worked_out=self._designs[name]
                )
            judges[name] = self._fitted[(name, unit)]
        return judges
