"""`eval --deep`: the deep analysis tier on the agent-trajectory rows, beside the rules.

Every agent run of the trajectory datasets (AgentDojo: task, tool calls with results,
answer) is sent through the same engine and deep tier as live traffic, with sampling and
budgets off. For each detector label those rows carry, the table shows the rule tier's
out-of-sample figures, the deep analysis's ("unsafe" counts as firing; an analysis that
failed counts as not firing, as the tier fails open), and the two tiers together (the rule
fired or the model said unsafe), on the very same rows; then what the model cost per
1,000 traces. The figures are those of whichever model the endpoint serves.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from otel_safety.evaluation.cases import Case
from otel_safety.evaluation.clusters import cluster_of
from otel_safety.evaluation.metrics import Counts, Interval, figures, measured, shown
from otel_safety.result_tables import align
from otel_safety.sink_base import ImmediateSink

DEEP_DATASETS = ("agentdojo",)  # the rows that are agent trajectories


@dataclass
class DeepVerdicts(ImmediateSink):
    """What the deep tier said of each trace: True/False, or None when it failed."""

    unsafe: dict[str, bool | None] = field(default_factory=dict)
    levels: dict[str, str] = field(default_factory=dict)

    def write_deep(self, results: Sequence[Any]) -> None:
        for result in results:
            finding = result.finding
            self.unsafe[result.trace_id] = None if finding is None else finding.detected
            self.levels[result.trace_id] = result.level.name

    # A sink of the engine that only listens to the deep tier.
    def write(self, evaluations: Sequence[Any]) -> None:
        pass


@dataclass
class DeepRow:
    detector: str
    dataset: str
    rule: Counts
    deep: Counts
    both: Counts
    intervals: dict[str, dict[str, Interval]]
    errors: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "detector": self.detector,
            "dataset": self.dataset,
            "rule": figures(self.rule, self.intervals["rule"]),
            "deep": figures(self.deep, self.intervals["deep"]),
            "rule_or_deep": figures(self.both, self.intervals["both"]),
            "deep_errors": self.errors,
        }


@dataclass
class DeepCost:
    traces: int  # analyses asked for
    analysed: int
    errors: int
    calls: int
    tokens: int
    model_seconds: float  # summed over calls
    wall_seconds: float  # from the first trace queued to the last analysis delivered

    def per_thousand(self) -> dict[str, float]:
        scale = 1000 / self.traces if self.traces else 0.0
        return {
            "calls": round(self.calls * scale, 1),
            "tokens": round(self.tokens * scale),
            "model_seconds": round(self.model_seconds * scale, 1),
            "wall_seconds": round(self.wall_seconds * scale, 1),
        }


@dataclass
class DeepFigures:
    model: str
    prompt_version: str
    rows: list[DeepRow]
    cost: DeepCost

    def as_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "prompt_version": self.prompt_version,
            "datasets": list(DEEP_DATASETS),
            "rows": [row.as_dict() for row in self.rows],
            "cost": {**vars(self.cost), "per_1000_traces": self.cost.per_thousand()},
        }

    def heading(self) -> str:
        return (
            f"Deep analysis (model {self.model}, prompt {self.prompt_version}) on the "
            f"agent-trajectory rows, beside the rule tier (same rows, same labels):"
        )

    def text(self) -> str:
        cells = [
            (
                "detector",
                "dataset",
                "rows",
                "pos",
                "rule P / R / F1",
                "deep P / R / F1",
                "rule or deep F1",
                "deep errors",
            )
        ]
        for row in self.rows:
            cells.append(
                (
                    row.detector,
                    row.dataset,
                    str(row.rule.rows),
                    str(row.rule.positives),
                    _prf(row.rule, row.intervals["rule"]),
                    _prf(row.deep, row.intervals["deep"]),
                    _f1(row.both, row.intervals["both"]),
                    str(row.errors),
                )
            )
        return align(cells) + "\n" + self.cost_line()

    def markdown(self) -> list[str]:
        lines = [
            "| detector | dataset | rows | positives | rule P / R / F1 | deep P / R / F1 | "
            "rule or deep F1 | deep errors |",
            "|---|---|---:|---:|---|---|---|---:|",
        ]
        for row in self.rows:
            lines.append(
                f"| `{row.detector}` | {row.dataset} | {row.rule.rows} | {row.rule.positives} | "
                f"{_prf(row.rule, row.intervals['rule'])} | "
                f"{_prf(row.deep, row.intervals['deep'])} | "
                f"{_f1(row.both, row.intervals['both'])} | {row.errors} |"
            )
        return [*lines, "", self.cost_line()]

    def cost_line(self) -> str:
        c, per = self.cost, self.cost.per_thousand()
        return (
            f"Deep cost: {c.traces} traces sent, {c.analysed} analysed, {c.errors} failed; "
            f"{c.calls} calls, {c.tokens} tokens, {c.model_seconds:.1f}s of model time, "
            f"{c.wall_seconds:.1f}s elapsed. Per 1,000 traces: {per['calls']:g} calls, "
            f"{per['tokens']:g} tokens, {per['model_seconds']:g}s of model time, "
            f"{per['wall_seconds']:g}s elapsed."
        )


# What each side of the comparison predicts from (the rules fired, the model said unsafe).
_TIERS: dict[str, Callable[[bool, bool], bool]] = {
    "rule": lambda fired, said: fired,
    "deep": lambda fired, said: said,
    "both": lambda fired, said: fired or said,
}


def measure_deep(
    case_of: dict[str, Case],
    rule_detected: dict[str, dict[str, bool]],
    verdicts: DeepVerdicts,
    active: set[str],
    cost: DeepCost,
    model: str,
    prompt_version: str,
    resamples: int,
    seed: int,
) -> DeepFigures:
    """The side-by-side rows over the traces that were sent to the deep tier."""
    # (detector, dataset) -> (cluster, label, rules fired, deep said unsafe) per trace
    pairs: dict[tuple[str, str], list[tuple[str, bool, bool, bool | None]]] = defaultdict(list)
    for trace_id, case in case_of.items():
        if case.dataset not in DEEP_DATASETS:
            continue
        deep = verdicts.unsafe.get(trace_id)
        rules = rule_detected.get(trace_id, {})
        for detector, label in case.labels.items():
            if detector in active:
                fired = rules.get(detector, False)
                pairs[(detector, case.dataset)].append((cluster_of(case), label, fired, deep))
    rows, args = [], (resamples, seed)
    for (detector, dataset), every in sorted(pairs.items()):
        # Side by side over the traces the deep tier answered: a failed analysis is no
        # verdict, not a "safe" one (and the rules are scored on the same traces).
        labelled = [(c, label, fired, said) for c, label, fired, said in every if said is not None]
        tiers = {
            tier: measured(
                ((c, label, pick(fired, said)) for c, label, fired, said in labelled), *args
            )
            for tier, pick in _TIERS.items()
        }
        rows.append(
            DeepRow(
                detector,
                dataset,
                tiers["rule"][0],
                tiers["deep"][0],
                tiers["both"][0],
                {tier: intervals for tier, (_, intervals) in tiers.items()},
                errors=len(every) - len(labelled),
            )
        )
    return DeepFigures(model, prompt_version, rows, cost)


def _prf(counts: Counts, intervals: dict[str, Interval]) -> str:
    return (
        f"{shown(counts, 'precision')} / {shown(counts, 'recall')} / "
        f"{shown(counts, 'f1', intervals['f1'])}"
    )


def _f1(counts: Counts, intervals: dict[str, Interval]) -> str:
    return shown(counts, "f1", intervals["f1"])
