"""Precision, recall and F1 with bootstrap intervals, and the always-fire baseline."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Counts:
    tp: int = 0
    fp: int = 0
    fn: int = 0
    tn: int = 0

    @property
    def rows(self) -> int:
        return self.tp + self.fp + self.fn + self.tn

    @property
    def positives(self) -> int:
        return self.tp + self.fn

    @property
    def precision(self) -> float:
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else 0.0

    @property
    def recall(self) -> float:
        return self.tp / self.positives if self.positives else 0.0

    @property
    def f1(self) -> float:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0

    def defined(self, rate: str) -> bool:
        """Whether `rate` means anything here: a precision needs a prediction, a recall a
        positive, an F1 either (no positive and nothing fired: 0/0, not 0)."""
        predicted, positives = self.tp + self.fp, self.positives
        return {"precision": predicted > 0, "recall": positives > 0}.get(
            rate, predicted > 0 or positives > 0
        )

    @property
    def false_positive_rate(self) -> float:
        negatives = self.fp + self.tn
        return self.fp / negatives if negatives else 0.0

    @property
    def baseline_f1(self) -> float:
        """F1 of a detector that always fires: precision = prevalence, recall = 1."""
        prevalence = self.positives / self.rows if self.rows else 0.0
        return 2 * prevalence / (1 + prevalence) if prevalence else 0.0


def count(pairs: Sequence[tuple[bool, bool]]) -> Counts:
    """(label, predicted) pairs -> confusion counts."""
    tp = sum(1 for label, predicted in pairs if label and predicted)
    fp = sum(1 for label, predicted in pairs if not label and predicted)
    fn = sum(1 for label, predicted in pairs if label and not predicted)
    return Counts(tp, fp, fn, len(pairs) - tp - fp - fn)


@dataclass(frozen=True)
class Interval:
    low: float
    high: float


def shown(counts: Counts, rate: str, interval: Interval | None = None) -> str:
    """A rate as the tables print it, with its interval: "n/a" where it is 0/0."""
    if not counts.defined(rate):
        return "n/a"
    value = f"{getattr(counts, rate):.3f}"
    return value if interval is None else f"{value} [{interval.low:.2f}-{interval.high:.2f}]"


def figures(counts: Counts, intervals: dict[str, Interval]) -> dict[str, object]:
    """Counts, rates and their intervals as the JSON reports print them."""
    return {
        "rows": counts.rows,
        "positives": counts.positives,
        "tp": counts.tp,
        "fp": counts.fp,
        "fn": counts.fn,
        "tn": counts.tn,
        **{
            rate: round(getattr(counts, rate), 4) if counts.defined(rate) else None
            for rate in ("precision", "recall", "f1")
        },
        "false_positive_rate": round(counts.false_positive_rate, 4),
        "ci95": {k: [round(v.low, 4), round(v.high, 4)] for k, v in intervals.items()},
    }


def bootstrap(counts: Counts, resamples: int = 1000, seed: int = 0) -> dict[str, Interval]:
    """95% percentile intervals of precision, recall and F1 over resampled rows.

    Rows are exchangeable given their confusion cell, so resampling the four cells with
    their observed weights is the same as resampling rows, and much faster.
    """
    if counts.rows == 0:
        return {name: Interval(0.0, 0.0) for name in ("precision", "recall", "f1")}
    rng = random.Random(seed)
    cells = ("tp", "fp", "fn", "tn")
    weights = [counts.tp, counts.fp, counts.fn, counts.tn]
    samples: dict[str, list[float]] = {"precision": [], "recall": [], "f1": []}
    for _ in range(resamples):
        drawn = rng.choices(cells, weights=weights, k=counts.rows)
        _keep(samples, Counts(*(drawn.count(cell) for cell in cells)))
    return {name: _percentiles(values) for name, values in samples.items()}


def cluster_bootstrap(
    clusters: Sequence[Counts], resamples: int = 1000, seed: int = 0
) -> dict[str, Interval]:
    """95% percentile intervals over resampled clusters: each draw takes a cluster's rows
    whole (`clusters.cluster_of`), so rows that answer one request count as one draw, not
    as independent evidence. Clusters of one row each are the row bootstrap, to the digit.
    """
    if all(c.rows == 1 for c in clusters):
        total = [sum(getattr(c, cell) for c in clusters) for cell in ("tp", "fp", "fn", "tn")]
        return bootstrap(Counts(*total), resamples, seed)
    rng = random.Random(seed)
    kinds = Counter((c.tp, c.fp, c.fn, c.tn) for c in clusters)
    shapes, weights = list(kinds), list(kinds.values())
    samples: dict[str, list[float]] = {"precision": [], "recall": [], "f1": []}
    for _ in range(resamples):
        drawn = Counter(rng.choices(range(len(shapes)), weights=weights, k=len(clusters)))
        _keep(samples, Counts(*(sum(shapes[i][c] * n for i, n in drawn.items()) for c in range(4))))
    return {name: _percentiles(values) for name, values in samples.items()}


def measured(
    rows: Iterable[tuple[str, bool, bool]], resamples: int = 1000, seed: int = 0
) -> tuple[Counts, dict[str, Interval]]:
    """(cluster, label, predicted) rows -> their counts and cluster-bootstrap intervals."""
    by_cluster: dict[str, list[tuple[bool, bool]]] = {}
    for cluster, label, predicted in rows:
        by_cluster.setdefault(cluster, []).append((label, predicted))
    clusters = [count(pairs) for pairs in by_cluster.values()]
    total = count([pair for pairs in by_cluster.values() for pair in pairs])
    return total, cluster_bootstrap(clusters, resamples, seed)


def _keep(samples: dict[str, list[float]], resampled: Counts) -> None:
    """A resample without positives has no recall (nor, without firings, precision): it is
    left out rather than scored 0, which would drag the interval off the estimate."""
    if resampled.tp + resampled.fp:
        samples["precision"].append(resampled.precision)
    if resampled.positives:
        samples["recall"].append(resampled.recall)
    if resampled.tp + resampled.fp + resampled.fn:
        samples["f1"].append(resampled.f1)


def _percentiles(values: list[float]) -> Interval:
    if not values:
        return Interval(0.0, 0.0)
    ordered = sorted(values)
    low = ordered[int(0.025 * (len(ordered) - 1))]
    high = ordered[round(0.975 * (len(ordered) - 1))]
    return Interval(low, high)
