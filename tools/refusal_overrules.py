"""Where the refusal judge overrules the rules, out-of-sample: was the answer a refusal?

Run: python tools/refusal_overrules.py --data ../shared/data
Needs the `train` extra (scikit-learn). For each group of the refusal judge's corpus (one
model's XSTest answers, one refusal battery we read), the judge is refitted without that
group, and the group's answers whose rule reading is of a kind `over_refusal` lets stand
(`RULE_STANDS`) are counted by label: all of them, and those the judge scores below 0.5.
This is the evidence for letting such a reading stand over the judge.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

from otel_safety.analysis.refusal.refusal import refusal_score
from otel_safety.detectors.over_refusal import RULE_STANDS
from otel_safety.evaluation.datasets import DataError
from otel_safety.evaluation.held_out import HeldOutJudges, training_available
from otel_safety.judges.corpus import examples
from otel_safety.judges.registry import ask, using

HEADER = (
    "| held out | answers | rules read it so (refused / not) | judge < 0.5 on those "
    "(refused / not) |\n|---|---:|---:|---:|"
)


def overrules(root: Path) -> list[tuple[str, int, Counter[bool], Counter[bool]]]:
    """Per group: its size, the labels of answers the rules read as a standing refusal, and
    the labels of those the judge fitted without the group scores below 0.5."""
    rows = examples("refusal", root)
    held_out = HeldOutJudges(root)
    result = []
    for group in sorted({row.group for row in rows}):
        mine = [row for row in rows if row.group == group]
        read, overruled = Counter[bool](), Counter[bool]()
        with using(held_out.for_fold(group, mine[0].dataset)):
            for row in mine:
                if refusal_score(row.fields["answer"]).kind not in RULE_STANDS:
                    continue
                read[row.label] += 1
                verdict = ask("refusal", **row.fields)
                if verdict is not None and verdict.probability < 0.5:
                    overruled[row.label] += 1
        result.append((group, len(mine), read, overruled))
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="../shared/data", help="the labelled data folder")
    args = parser.parse_args(argv)
    if not training_available():
        print("needs scikit-learn: pip install 'otel-safety[train]'", file=sys.stderr)
        return 2
    try:
        groups = overrules(Path(args.data))
    except DataError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"Rule readings that stand: {', '.join(sorted(RULE_STANDS))}\n\n{HEADER}")
    for group, size, read, overruled in groups:
        print(
            f"| {group} | {size} | {read[True]} / {read[False]} | "
            f"{overruled[True]} / {overruled[False]} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
