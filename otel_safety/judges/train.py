"""Fit the learned judges and measure them on groups they never saw (the `train` extra).

Logistic regression (scikit-learn) over the features of `judges.definitions`. The regularisation
strength is fixed in advance, not searched, so no held-out row tunes anything. Figures come
from leave-one-group-out: each group (one model's answers, or one dataset's requests) is
scored by a judge fitted on the other groups alone; three variants are compared the same
way: rules alone, words alone, words and rules.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from otel_safety.analysis.features import feature_ids
from otel_safety.evaluation.metrics import Counts, count
from otel_safety.extras import install_hint
from otel_safety.judges.corpus import Example
from otel_safety.judges.definitions import JudgeDefinition
from otel_safety.judges.model import LinearJudge

__all__ = [
    "RULES_AS_WRITTEN",
    "VARIANTS",
    "Fold",
    "cross_validate",
    "design",
    "fit",
    "holdout_key",
    "pooled",
]

C = 0.5  # L2 strength, fixed before any figure was seen
VERSION = "1"
VARIANTS = ("rules", "words", "words+rules")
RULES_AS_WRITTEN = "rules as written"


def _sklearn():
    try:
        from scipy.sparse import csr_matrix
        from sklearn.linear_model import LogisticRegression
    except ImportError as exc:
        raise SystemExit(
            f"training the judges needs scikit-learn: {install_hint('train')}"
        ) from exc
    return csr_matrix, LogisticRegression


@dataclass
class _Design:
    """Every example's feature ids and rule scores, worked out once."""

    ids: list[list[int]]
    rules: list[dict[str, float]]
    rule_names: list[str]
    size: int


def design(definition: JudgeDefinition, rows: Sequence[Example]) -> _Design:
    ids = [
        sorted(
            {i for spec in definition.specs for i in feature_ids(row.fields.get(spec.field), spec)}
        )
        for row in rows
    ]
    rules = [definition.rules(row.fields) for row in rows]
    names = sorted({name for scores in rules for name in scores if not name.startswith("_")})
    return _Design(ids, rules, names, definition.specs[0].size)


def _matrix(d: _Design, picked: Sequence[int], variant: str):
    csr_matrix, _ = _sklearn()
    data, columns, pointers = [], [], [0]
    for index in picked:
        if variant != "rules":
            columns.extend(d.ids[index])
            data.extend([1.0] * len(d.ids[index]))
        if variant != "words":
            for offset, name in enumerate(d.rule_names):
                columns.append(d.size + offset)
                data.append(d.rules[index].get(name, 0.0))
        pointers.append(len(columns))
    return csr_matrix((data, columns, pointers), shape=(len(picked), d.size + len(d.rule_names)))


def _fit_model(
    d: _Design, rows: Sequence[Example], picked: Sequence[int], variant: str, balance: str
):
    _, LogisticRegression = _sklearn()
    labels = [rows[i].label for i in picked]
    if balance == "datasets":
        model = LogisticRegression(C=C, max_iter=2_000)
        model.fit(_matrix(d, picked, variant), labels, sample_weight=_dataset_weights(rows, picked))
    else:
        model = LogisticRegression(C=C, class_weight="balanced", max_iter=2_000)
        model.fit(_matrix(d, picked, variant), labels)
    return model


def _dataset_weights(rows: Sequence[Example], picked: Sequence[int]) -> list[float]:
    """Weights giving every dataset, and within it each label, the same total weight, so
    that nothing that only says which dataset a row came from predicts its label."""
    cells: dict[tuple[str, bool], int] = {}
    for i in picked:
        key = (rows[i].dataset, rows[i].label)
        cells[key] = cells.get(key, 0) + 1
    scale = len(picked) / len(cells)
    return [scale / cells[(rows[i].dataset, rows[i].label)] for i in picked]


def fit(
    definition: JudgeDefinition,
    rows: Sequence[Example],
    card: dict | None = None,
    *,
    picked: Sequence[int] | None = None,
    worked_out: _Design | None = None,
) -> LinearJudge:
    """The judge (the definition's `fitted` variant: words and rules, or rules alone)
    fitted on the rows given (or the `picked` ones of them; `worked_out` is their `design`,
    when it is already known). A rules-only judge reads no words and carries no word weights."""
    d = worked_out or design(definition, rows)
    chosen = range(len(rows)) if picked is None else picked
    model = _fit_model(d, rows, chosen, definition.fitted, definition.balance)
    coefficients = model.coef_[0]
    words = definition.fitted != "rules"
    return LinearJudge(
        name=definition.name,
        version=VERSION,
        specs=definition.specs if words else (),
        bias=float(model.intercept_[0]),
        weights=array("f", coefficients[: d.size].tolist() if words else []),
        rule_weights={n: float(coefficients[d.size + k]) for k, n in enumerate(d.rule_names)},
        card=card or {},
    )


@dataclass(frozen=True)
class Fold:
    """One held-out unit scored by a judge fitted without it."""

    variant: str
    held_out: str
    counts: Counts


def holdout_key(definition: JudgeDefinition, row: Example) -> str:
    return row.group if definition.holdout == "group" else row.dataset


def cross_validate(
    definition: JudgeDefinition,
    rows: Sequence[Example],
    variants: Sequence[str] = VARIANTS,
    progress: Callable[[str], None] | None = None,
    *,
    within: str | None = None,
    worked_out: _Design | None = None,
) -> list[Fold]:
    """Leave-one-out over the definition's held-out units, for each variant; with `within`
    (a dataset), over that dataset's groups instead, each judge fitted on every other row."""

    def unit(row: Example) -> str | None:
        if within is None:
            return holdout_key(definition, row)
        return row.group if row.dataset == within else None

    d = worked_out or design(definition, rows)
    keys = sorted({k for row in rows if (k := unit(row)) is not None})
    folds = []
    for key in keys:
        scored = [i for i, row in enumerate(rows) if unit(row) == key]
        fitted = [i for i, row in enumerate(rows) if unit(row) != key]
        if len({rows[i].label for i in fitted}) < 2:
            continue  # nothing to learn from without this unit
        if definition.rule_verdict:  # the detector's rules as written: nothing fitted
            rule = definition.rule_verdict
            pairs = [(rows[i].label, d.rules[i].get(rule, 0.0) >= 0.5) for i in scored]
            folds.append(Fold(RULES_AS_WRITTEN, key, count(pairs)))
        for variant in variants:
            model = _fit_model(d, rows, fitted, variant, definition.balance)
            predicted = model.predict_proba(_matrix(d, scored, variant))[:, 1] >= 0.5
            pairs = [(rows[i].label, bool(p)) for i, p in zip(scored, predicted, strict=True)]
            folds.append(Fold(variant, key, count(pairs)))
        if progress:
            progress(f"{definition.name}: held out {key} ({len(scored)} rows)")
    return folds


def pooled(folds: Sequence[Fold], variant: str) -> Counts:
    """The out-of-sample confusion counts of one variant over every held-out unit."""
    total = Counts()
    for fold in folds:
        if fold.variant == variant:
            c = fold.counts
            total = Counts(total.tp + c.tp, total.fp + c.fp, total.fn + c.fn, total.tn + c.tn)
    return total
