"""`otel-safety eval`: labelled cases -> spans -> the live pipeline -> figures per detector.

Every case becomes the spans of an instrumented agent run and goes through the same engine,
detectors, policy and store as production traffic; labels go to the store's `labels` table
next to the findings, so the figures can be recomputed (and thresholds calibrated) in SQL.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from otel_safety.bootstrap import build_engine
from otel_safety.config import Settings
from otel_safety.evaluation.cases import Case, SpanWriter
from otel_safety.evaluation.metrics import Counts, Interval, bootstrap, count
from otel_safety.exporters.duckdb import DuckDBStore, write_labels
from otel_safety.mapping import trace_id_hex
from otel_safety.pipeline import TraceEvaluation

ALL_EXTERNAL = "all external"


@dataclass
class Row:
    """One detector on one dataset."""

    detector: str
    dataset: str
    source: str
    counts: Counts
    intervals: dict[str, Interval]

    def as_dict(self) -> dict[str, Any]:
        c = self.counts
        return {
            "detector": self.detector,
            "dataset": self.dataset,
            "source": self.source,
            "rows": c.rows,
            "positives": c.positives,
            "tp": c.tp,
            "fp": c.fp,
            "fn": c.fn,
            "tn": c.tn,
            "precision": round(c.precision, 4),
            "recall": round(c.recall, 4),
            "f1": round(c.f1, 4),
            "false_positive_rate": round(c.false_positive_rate, 4),
            "ci95": {k: [round(v.low, 4), round(v.high, 4)] for k, v in self.intervals.items()},
            "baseline_f1": round(c.baseline_f1, 4),
        }


@dataclass
class EvalReport:
    rows: list[Row]
    cases: int
    seconds: float
    db_path: str
    resamples: int
    seed: int
    sampled: int | None = None

    def row(self, detector: str, dataset: str) -> Row | None:
        return next((r for r in self.rows if (r.detector, r.dataset) == (detector, dataset)), None)

    def as_dict(self) -> dict[str, Any]:
        return {
            "cases": self.cases,
            "seconds": round(self.seconds, 1),
            "store": self.db_path,
            "bootstrap": {"resamples": self.resamples, "seed": self.seed, "interval": "95%"},
            "sample_per_dataset": self.sampled,
            "rows": [r.as_dict() for r in self.rows],
        }

    def table(self) -> str:
        header = (
            "detector",
            "dataset",
            "source",
            "rows",
            "pos",
            "precision",
            "recall",
            "F1",
            "always-fire F1",
        )
        lines = [header]
        for r in self.rows:
            c, ci = r.counts, r.intervals
            lines.append(
                (
                    r.detector,
                    r.dataset,
                    r.source,
                    str(c.rows),
                    str(c.positives),
                    _with_ci(c.precision, ci["precision"]),
                    _with_ci(c.recall, ci["recall"]),
                    _with_ci(c.f1, ci["f1"]),
                    f"{c.baseline_f1:.3f}",
                )
            )
        widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
        rendered = [
            "  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip()
            for line in lines
        ]
        rendered.insert(1, "  ".join("-" * w for w in widths))
        return "\n".join(rendered)


class _Collector:
    """A sink that remembers each trace's verdicts for the metrics."""

    def __init__(self) -> None:
        self.detected: dict[str, dict[str, bool]] = {}
        self.roots: dict[str, str] = {}

    def write(self, evaluations: Sequence[TraceEvaluation]) -> None:
        for evaluation in evaluations:
            verdicts = self.detected.setdefault(evaluation.trace_id, {})
            for finding in evaluation.findings:
                verdicts[finding.detector] = (
                    verdicts.get(finding.detector, False) or finding.detected
                )
            if evaluation.trajectory and evaluation.trajectory.root_span_id:
                self.roots[evaluation.trace_id] = evaluation.trajectory.root_span_id

    def tick(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True

    def shutdown(self) -> None:
        pass


def run_eval(
    cases: Sequence[Case],
    db_path: str,
    *,
    detectors: Sequence[str] | None = None,
    resamples: int = 1000,
    seed: int = 0,
    progress: TextIO | None = None,
    sampled: int | None = None,
) -> EvalReport:
    started = time.monotonic()
    settings = Settings.resolve(db_path=db_path, detectors=list(detectors) if detectors else None)
    collector = _Collector()
    engine = build_engine(settings, [DuckDBStore(db_path, hold=True), collector], background=False)
    writer = SpanWriter()
    case_of: dict[str, Case] = {}
    try:
        for number, case in enumerate(cases, start=1):
            spans = writer.spans(case)
            case_of[trace_id_hex(spans[0].context.trace_id)] = case
            engine.process(spans)
            if progress is not None and number % 500 == 0:
                progress.write(f"eval: {number}/{len(cases)} cases judged\n")
                progress.flush()
    finally:
        engine.shutdown()
        writer.shutdown()
    write_labels(
        db_path,
        [
            {
                "trace_id": trace_id,
                "span_id": collector.roots.get(trace_id),
                "detector": detector,
                "label": label,
                "source": f"{case.source}:{case.dataset}",
                "note": case.case_id,
            }
            for trace_id, case in case_of.items()
            for detector, label in case.labels.items()
        ],
    )
    active = {detector.key for detector in engine.pipeline.detectors}
    rows = _rows(case_of, collector.detected, active, resamples, seed)
    return EvalReport(
        rows, len(cases), time.monotonic() - started, db_path, resamples, seed, sampled
    )


def _rows(
    case_of: dict[str, Case],
    detected: dict[str, dict[str, bool]],
    active: set[str],
    resamples: int,
    seed: int,
) -> list[Row]:
    pairs: dict[tuple[str, str, str], list[tuple[bool, bool]]] = defaultdict(list)
    for trace_id, case in case_of.items():
        verdicts = detected.get(trace_id, {})
        for detector, label in case.labels.items():
            if detector not in active:
                continue
            pair = (label, verdicts.get(detector, False))
            pairs[(detector, case.dataset, case.source)].append(pair)
            if case.source == "external":
                pairs[(detector, ALL_EXTERNAL, "external")].append(pair)
    rows = []
    for (detector, dataset, source), labelled in sorted(pairs.items(), key=_order):
        counts = count(labelled)
        rows.append(Row(detector, dataset, source, counts, bootstrap(counts, resamples, seed)))
    return rows


def _order(item: tuple[tuple[str, str, str], Any]) -> tuple[str, int, str]:
    detector, dataset, source = item[0]
    rank = {"external": 0, "synthetic": 2}.get(source, 1) + (dataset == ALL_EXTERNAL)
    return detector, rank, dataset


def _with_ci(value: float, interval: Interval) -> str:
    return f"{value:.3f} [{interval.low:.2f}-{interval.high:.2f}]"
