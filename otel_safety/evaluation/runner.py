"""`otel-safety eval`: labelled cases -> spans -> the live pipeline -> figures per detector.

Every case becomes the spans of an instrumented agent run and goes through the same engine,
detectors, policy and store as production traffic; labels go to the store's `labels` table
next to the findings, so the figures can be recomputed (and thresholds calibrated) in SQL.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from otel_safety.bootstrap import build_engine
from otel_safety.config import Settings
from otel_safety.evaluation.cases import Case, SpanWriter
from otel_safety.evaluation.clusters import cluster_of
from otel_safety.evaluation.deep import (
    DEEP_DATASETS,
    DeepCost,
    DeepFigures,
    DeepVerdicts,
    measure_deep,
)
from otel_safety.evaluation.escalation import (
    HEADER,
    EscalationFigures,
    measure,
    measure_acted_on,
    measure_agent_runs,
    measure_by_model,
    measure_harmful_tasks,
)
from otel_safety.evaluation.held_out import HeldOutJudges, fold_of, origin
from otel_safety.evaluation.metrics import Counts, Interval, figures, measured, shown
from otel_safety.exporters.duckdb import DuckDBStore, write_labels
from otel_safety.judges import judge, using
from otel_safety.mapping import trace_id_hex
from otel_safety.model import EscalationLevel
from otel_safety.pipeline import TraceEvaluation
from otel_safety.result_tables import align
from otel_safety.sink_base import ImmediateSink

ALL_EXTERNAL = "all external"
# Pools of external sets that one of the goals names, reported beside "all external":
# the injection goal is about text the agent read in tool results and retrieved content, which
# the user-typed jailbreak prompts of `direct_injection` are not.
GOAL_POOLS: dict[str, tuple[str, frozenset[str]]] = {
    "injection": (
        "tool results and retrieved content",
        frozenset({"agentdojo", "agentdojo_attacks", "bipia"}),
    ),
}


@dataclass
class Row:
    """One detector on one dataset."""

    detector: str
    dataset: str
    source: str
    counts: Counts  # out-of-sample: learned judges never fitted on the row's group
    intervals: dict[str, Interval]
    in_sample: Counts | None = None  # with the packaged judges, fitted on every row

    def as_dict(self) -> dict[str, Any]:
        c = self.counts
        return {
            "detector": self.detector,
            "dataset": self.dataset,
            "source": self.source,
            **figures(c, self.intervals),
            "baseline_f1": round(c.baseline_f1, 4),
            "in_sample_f1": None if self.in_sample is None else round(self.in_sample.f1, 4),
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
    unlabelled: dict[tuple[str, str], tuple[int, int]] = field(default_factory=dict)
    escalation: list[EscalationFigures] = field(default_factory=list)
    deep: DeepFigures | None = None  # with `eval --deep` only
    # What the figures depend on besides the data (datasets, detectors, judges, thresholds),
    # as the command was given it; `departures` names those that are not the defaults.
    settings: dict[str, Any] = field(default_factory=dict)
    departures: list[str] = field(default_factory=list)

    def row(self, detector: str, dataset: str) -> Row | None:
        return next((r for r in self.rows if (r.detector, r.dataset) == (detector, dataset)), None)

    def as_dict(self) -> dict[str, Any]:
        extra = {} if self.deep is None else {"deep": self.deep.as_dict()}
        return {
            "cases": self.cases,
            "seconds": round(self.seconds, 1),
            "store": self.db_path,
            "bootstrap": {
                "resamples": self.resamples,
                "seed": self.seed,
                "interval": "95%",
                "resampled": "clusters: the rows made from one request or task, whole",
            },
            "sample_per_dataset": self.sampled,
            "settings": self.settings,
            "rows": [r.as_dict() for r in self.rows],
            "escalation": [figures.as_dict() for figures in self.escalation],
            "fires_without_labels": [
                {"detector": d, "dataset": ds, "rows": n, "fired": fired}
                for (d, ds), (fired, n) in sorted(self.unlabelled.items())
            ],
            **extra,
        }

    def firing_table(self) -> str:
        """Where a detector has no labels, how often it fires: its false-alarm exposure."""
        cells = [("detector", "dataset", "fired / rows")]
        for (detector, dataset), (fired, rows) in sorted(self.unlabelled.items()):
            share = f" ({100 * fired / rows:.1f}%)" if rows else ""
            cells.append((detector, dataset, f"{fired} / {rows}{share}"))
        return align(cells)

    def markdown(self) -> str:
        """The table as Markdown, for the README (regenerated by `make readme-eval`)."""
        lines = (
            [f"Not the default run: {'; '.join(self.departures)}.", ""] if self.departures else []
        )
        lines += [
            "| detector | dataset | source | rows | positives | precision | recall | F1 | "
            "in-sample F1 | always-fire F1 |",
            "|---|---|---|---:|---:|---|---|---|---:|---:|",
        ]
        for r in self.rows:
            c, ci = r.counts, r.intervals
            lines.append(
                f"| `{r.detector}` | {r.dataset} | {r.source} | {c.rows} | {c.positives} | "
                f"{shown(c, 'precision', ci['precision'])} | {shown(c, 'recall', ci['recall'])} | "
                f"{shown(c, 'f1', ci['f1'])} | {_in_sample(r)} | {c.baseline_f1:.3f} |"
            )
        if self.escalation:
            lines += ["", "The escalation ladder on agent runs:", "", *HEADER]
            lines += [line for figures in self.escalation for line in figures.lines()]
        if self.deep is not None:
            lines += ["", self.deep.heading(), "", *self.deep.markdown()]
        lines += [
            "",
            "Where a dataset has no label for a detector, how often it fires anyway:",
            "",
            "| detector | dataset | fired / rows |",
            "|---|---|---:|",
        ]
        for (detector, dataset), (fired, rows) in sorted(self.unlabelled.items()):
            lines.append(f"| `{detector}` | {dataset} | {fired} / {rows} |")
        return "\n".join(lines)

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
            "in-sample F1",
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
                    shown(c, "precision", ci["precision"]),
                    shown(c, "recall", ci["recall"]),
                    shown(c, "f1", ci["f1"]),
                    _in_sample(r),
                    f"{c.baseline_f1:.3f}",
                )
            )
        return align(lines)


class _Collector(ImmediateSink):
    """A sink that remembers each trace's verdicts for the metrics."""

    def __init__(self) -> None:
        self.detected: dict[str, dict[str, bool]] = {}
        self.roots: dict[str, str] = {}
        self.levels: dict[str, EscalationLevel] = {}

    def write(self, evaluations: Sequence[TraceEvaluation]) -> None:
        for evaluation in evaluations:
            verdicts = self.detected.setdefault(evaluation.trace_id, {})
            for finding in evaluation.findings:
                verdicts[finding.detector] = (
                    verdicts.get(finding.detector, False) or finding.detected
                )
            level = self.levels.get(evaluation.trace_id, EscalationLevel.NONE)
            self.levels[evaluation.trace_id] = max(level, evaluation.level)
            if evaluation.trajectory and evaluation.trajectory.root_span_id:
                self.roots[evaluation.trace_id] = evaluation.trajectory.root_span_id


def run_eval(
    cases: Sequence[Case],
    db_path: str,
    *,
    detectors: Sequence[str] | None = None,
    resamples: int = 1000,
    seed: int = 0,
    progress: TextIO | None = None,
    sampled: int | None = None,
    held_out: HeldOutJudges | None = None,
    deep: dict[str, Any] | None = None,
) -> EvalReport:
    """Judge every case with the packaged judges (stored, the in-sample figures); with
    `held_out`, judge again each fold that a judge was fitted on, with judges fitted
    without it, for the out-of-sample figures. With `deep` (deep settings over those of the
    environment, `{}` for none), the agent-trajectory rows also go to the deep analysis
    tier (`evaluation.deep`); without it the tier stays off whatever the environment says."""
    started = time.monotonic()
    keys = list(detectors) if detectors else None
    settings = Settings.resolve(db_path=db_path, detectors=keys, deep=False)
    collector = _Collector()
    verdicts = DeepVerdicts()
    case_of: dict[str, Case] = {}
    engine = build_engine(
        settings
        if deep is None
        else _every_trajectory(
            Settings.resolve(db_path=db_path, detectors=keys, **{**deep, "deep": True}),
            len(cases),
        ),
        [DuckDBStore(db_path, hold=True), collector, verdicts],
        background=False,
        deep_select=lambda e: "eval" if _trajectory_row(case_of.get(e.trace_id)) else None,
    )
    writer = SpanWriter()
    try:
        for number, case in enumerate(cases, start=1):
            spans = writer.spans(case)
            case_of[trace_id_hex(spans[0].context.trace_id)] = case
            engine.process(spans)
            _say(progress, number, len(cases), "cases judged")
        if engine.deep is not None:
            engine.drain()
            engine.deep.wait(progress, "eval --deep")
    finally:
        engine.shutdown()
        writer.shutdown()
    active = {detector.key for detector in engine.pipeline.detectors}
    write_labels(  # for the detectors that judged: a label of one that did not would read as
        db_path,  # "did not fire" to `confusion_matrix` and `calibrate`
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
            if detector in active
        ],
    )
    in_sample = _rows(case_of, collector.detected, active, resamples, seed)
    rows = in_sample
    for row in rows:  # without a refit, the figures are the in-sample ones: say so
        row.in_sample = row.counts
    levels = collector.levels
    detected = collector.detected
    if held_out is not None:
        detected, levels = _judge_held_out(settings, case_of, collector, held_out, progress)
        rows = _rows(case_of, detected, active, resamples, seed)
        before = {(r.detector, r.dataset, r.source): r.counts for r in in_sample}
        for row in rows:
            row.in_sample = before.get((row.detector, row.dataset, row.source))
    figures_deep = None
    if engine.deep is not None:
        stats = engine.stats
        figures_deep = measure_deep(
            case_of,
            detected,
            verdicts,
            active,
            DeepCost(
                traces=stats["deep_queued"],
                analysed=stats["deep_analysed"],
                errors=stats["deep_errors"],
                calls=stats["deep_calls"],
                tokens=stats["deep_tokens"],
                model_seconds=stats["deep_milliseconds"] / 1000,
                wall_seconds=_elapsed(engine.deep.first_queued, engine.deep.last_done),
            ),
            engine.deep.config.model,
            engine.deep.config.prompt.version,
            resamples,
            seed,
        )
    return EvalReport(
        rows,
        len(cases),
        time.monotonic() - started,
        db_path,
        resamples,
        seed,
        sampled,
        _unlabelled(  # out of sample, as the headline rows are
            case_of,
            detected,
            {d.key for d in engine.pipeline.detectors if d.can_fire},
        ),
        escalation=_escalation(case_of, levels, resamples, seed),
        deep=figures_deep,
    )


def _escalation(
    case_of: dict[str, Case], levels: dict[str, EscalationLevel], resamples: int, seed: int
) -> list[EscalationFigures]:
    """The ladder's lines in the table's order: AgentDojo pooled, then per model, AgentHarm,
    our sets; a line whose runs are not among the cases is left out."""
    args = (case_of, levels, resamples, seed)
    lines = [
        measure(*args),
        measure_acted_on(*args),
        *measure_by_model(*args),
        measure_harmful_tasks(*args),
        *measure_agent_runs(*args),
    ]
    return [line for line in lines if line is not None]


def _judge_held_out(
    settings: Settings,
    case_of: dict[str, Case],
    first: _Collector,
    held_out: HeldOutJudges,
    progress: TextIO | None,
) -> tuple[dict[str, dict[str, bool]], dict[str, EscalationLevel]]:
    """The verdicts and levels with, for each fold, the judges that never saw it: folds
    whose judges are all the packaged ones keep their first ones; the others are judged
    again."""
    folds: dict[str, list[str]] = defaultdict(list)
    for trace_id, case in case_of.items():
        folds[fold_of(case)].append(trace_id)
    result, levels = dict(first.detected), dict(first.levels)
    collector = _Collector()
    engine = build_engine(settings, [collector], background=False)
    used = {name for detector in engine.pipeline.detectors for name in detector.learned_judges}
    writer = SpanWriter()
    judged = 0
    try:
        for fold, trace_ids in sorted(folds.items()):
            judges = held_out.for_fold(fold, origin(case_of[trace_ids[0]]), used)
            if all(j is judge(name) for name, j in judges.items()):
                continue  # no judge saw this fold: its verdicts are out-of-sample already
            with using(judges):
                for trace_id in trace_ids:
                    spans = writer.spans(case_of[trace_id])
                    again = trace_id_hex(spans[0].context.trace_id)
                    engine.process(spans)
                    engine.drain()
                    result[trace_id] = collector.detected.get(again, {})
                    levels[trace_id] = collector.levels.get(again, EscalationLevel.NONE)
                    judged += 1
                    _say(progress, judged, None, "cases judged again, out-of-sample")
    finally:
        engine.shutdown()
        writer.shutdown()
    return result, levels


def _every_trajectory(deep: Settings, cases: int) -> Settings:
    """The deep settings for an evaluation: every agent-trajectory row is analysed (no
    sampling, no budget, a queue that holds them all)."""
    return deep.model_copy(
        update={
            "deep": True,
            "deep_sample_rate": 1.0,
            "deep_per_minute": 0,
            "deep_tokens_per_minute": 0,
            "deep_queue_size": max(1, cases),
        }
    )


def _elapsed(start: float | None, end: float | None) -> float:
    return 0.0 if start is None or end is None else max(0.0, end - start)


def _trajectory_row(case: Case | None) -> bool:
    return case is not None and case.dataset in DEEP_DATASETS


def _say(progress: TextIO | None, number: int, total: int | None, what: str) -> None:
    if progress is not None and number % 500 == 0:
        progress.write(f"eval: {number}{'' if total is None else f'/{total}'} {what}\n")
        progress.flush()


def _rows(
    case_of: dict[str, Case],
    detected: dict[str, dict[str, bool]],
    active: set[str],
    resamples: int,
    seed: int,
) -> list[Row]:
    # (detector, dataset, source) -> (cluster, label, fired) per labelled case
    labelled: dict[tuple[str, str, str], list[tuple[str, bool, bool]]] = defaultdict(list)
    for trace_id, case in case_of.items():
        verdicts = detected.get(trace_id, {})
        cluster = cluster_of(case)
        # A dataset's wider framing (XSTest's every prompt), labelled by its reader.
        for detector, label in case.meta.get("every_prompt", {}).items():
            if detector in active:
                row = (cluster, label, verdicts.get(detector, False))
                labelled[(detector, f"{case.dataset}, every prompt", case.source)].append(row)
        for detector, label in case.labels.items():
            if detector not in active:
                continue
            row = (cluster, label, verdicts.get(detector, False))
            labelled[(detector, case.dataset, case.source)].append(row)
            if case.source == "external":
                labelled[(detector, ALL_EXTERNAL, "external")].append(row)
                pool, members = GOAL_POOLS.get(detector, ("", frozenset()))
                if case.dataset in members:
                    labelled[(detector, pool, "external")].append(row)
    return [
        Row(detector, dataset, source, *measured(rows, resamples, seed))
        for (detector, dataset, source), rows in sorted(labelled.items(), key=_order)
    ]


def _unlabelled(
    case_of: dict[str, Case], detected: dict[str, dict[str, bool]], active: set[str]
) -> dict[tuple[str, str], tuple[int, int]]:
    """(detector, dataset) -> (fired, rows) over the rows that carry no label for it."""
    tally: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for trace_id, case in case_of.items():
        verdicts = detected.get(trace_id, {})
        for detector in active - case.labels.keys():
            cell = tally[(detector, case.dataset)]
            cell[0] += verdicts.get(detector, False)
            cell[1] += 1
    return {key: (fired, rows) for key, (fired, rows) in tally.items()}


def _order(item: tuple[tuple[str, str, str], Any]) -> tuple[str, float, str]:
    """A detector's datasets, then its goal's pool, then all external, then the rest."""
    detector, dataset, source = item[0]
    pooled = dataset == GOAL_POOLS.get(detector, ("",))[0]
    rank = {"external": 0, "synthetic": 2}.get(source, 1) + 0.5 * pooled
    return detector, rank + (dataset == ALL_EXTERNAL), dataset


def _in_sample(row: Row) -> str:
    return "-" if row.in_sample is None else shown(row.in_sample, "f1")
