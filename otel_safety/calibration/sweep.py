"""Threshold sweep and stratified k-fold cross-validation of the threshold choice.

A detector fires when its score reaches the threshold and is above zero (as
`Detector.evaluate` decides), so the candidate thresholds are the positive scores observed.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from otel_safety.calibration.data import Labelled
from otel_safety.evaluation.metrics import Counts, count


def fires(score: float, threshold: float | None) -> bool:
    return threshold is not None and score > 0.0 and score >= threshold


@dataclass(frozen=True)
class SweepPoint:
    threshold: float
    counts: Counts


def sweep(rows: Sequence[Labelled]) -> list[SweepPoint]:
    """Confusion counts at every observed positive score, highest threshold first.

    One pass over the rows sorted by score: lowering the threshold to the next score adds
    that score's rows to the fired side.
    """
    positives = sum(row.label for row in rows)
    negatives = len(rows) - positives
    by_score: dict[float, list[int]] = defaultdict(lambda: [0, 0])
    for row in rows:
        if row.score > 0.0:
            by_score[row.score][0 if row.label else 1] += 1
    points, tp, fp = [], 0, 0
    for score in sorted(by_score, reverse=True):
        tp += by_score[score][0]
        fp += by_score[score][1]
        points.append(SweepPoint(score, Counts(tp, fp, positives - tp, negatives - fp)))
    return points


def best_threshold(rows: Sequence[Labelled]) -> float | None:
    """The threshold with the highest F1; ties go to higher precision, then fewer alerts.

    None when no row has a positive score (nothing could ever fire) or no threshold finds
    a positive.
    """
    best: tuple[float, float, float] | None = None
    for point in sweep(rows):
        if point.counts.tp == 0:
            continue
        key = (point.counts.f1, point.counts.precision, point.threshold)
        if best is None or key > best:
            best = key
    return None if best is None else best[2]


def placed_threshold(rows: Sequence[Labelled], default: float | None = None) -> float | None:
    """The threshold to propose: the best sweep point's, placed in the gap below it.

    Every threshold above the next lower observed score and up to the best point's fires
    on the same rows, so the labels cannot tell them apart. The best point itself is the
    lowest positive score there, the one placement that misses any positive scoring a
    little lower on other traces; the default, when it lies in the gap, stays (no label
    asks to move it), else the gap's middle is taken.
    """
    best = best_threshold(rows)
    if best is None:
        return None
    below = max((row.score for row in rows if 0.0 < row.score < best), default=0.0)
    if default is not None and below < default <= best:
        return default
    middle = round((below + best) / 2, 4)
    return middle if below < middle <= best else best


def stratified_folds(rows: Sequence[Labelled], k: int, seed: int) -> list[int]:
    """A fold number per row: rows of each (label, source) stratum shuffled with the seed
    and dealt round-robin, so every fold keeps the class balance and the dataset mix."""
    strata: dict[tuple[bool, str], list[int]] = defaultdict(list)
    for index, row in enumerate(rows):
        strata[(row.label, row.source)].append(index)
    rng = random.Random(seed)
    folds = [0] * len(rows)
    dealt = 0
    for key in sorted(strata):
        members = strata[key]
        rng.shuffle(members)
        for index in members:
            folds[index] = dealt % k
            dealt += 1
    return folds


@dataclass
class CrossValidation:
    folds: int
    pairs: list[tuple[bool, bool]]  # (label, predicted on the held-out fold), per row
    thresholds: list[float | None]  # chosen on the training folds, per fold
    fold_f1: list[float]  # F1 on each held-out fold

    @property
    def counts(self) -> Counts:
        return count(self.pairs)


def usable_folds(rows: Sequence[Labelled], wanted: int) -> int:
    """As many folds as asked, but no more than each class has rows (0: cannot validate)."""
    positives = sum(row.label for row in rows)
    smallest = min(positives, len(rows) - positives)
    return min(wanted, smallest) if smallest >= 2 else 0


def cross_validate(
    rows: Sequence[Labelled], k: int, seed: int, default: float | None = None
) -> CrossValidation | None:
    """Choose the threshold on k-1 folds (`placed_threshold`), score the held-out fold; None
    if k < 2."""
    k = usable_folds(rows, k)
    if k < 2:
        return None
    folds = stratified_folds(rows, k, seed)
    pairs: list[tuple[bool, bool]] = [(row.label, False) for row in rows]
    thresholds, fold_f1 = [], []
    for fold in range(k):
        train = [row for row, f in zip(rows, folds, strict=True) if f != fold]
        threshold = placed_threshold(train, default)
        held = []
        for index, (row, f) in enumerate(zip(rows, folds, strict=True)):
            if f == fold:
                pairs[index] = (row.label, fires(row.score, threshold))
                held.append(pairs[index])
        thresholds.append(threshold)
        fold_f1.append(count(held).f1)
    return CrossValidation(k, pairs, thresholds, fold_f1)
