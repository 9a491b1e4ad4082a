"""How many of one BIPIA split's attacks the `injection` detector flags, by attack category.

Run: python tools/bipia_split.py --data ../shared/data [--split train] [--attacks 8]
Needs the `train` extra (scikit-learn): the injection judge is refitted without BIPIA, as
`otel-safety eval` scores it. BIPIA's train and test splits share no attack (not even a
category), so a rule chosen by what this prints for the train split is measured out of
sample by the test split, the `bipia` line of the README's table. Each context of the split
is read back as a tool result once clean and `--attacks` times with an attack inserted.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

from otel_safety.evaluation import datasets
from otel_safety.evaluation.cases import SpanWriter
from otel_safety.evaluation.datasets import DataError
from otel_safety.evaluation.held_out import HeldOutJudges, training_available
from otel_safety.judges.registry import using
from otel_safety.pipeline import Pipeline


def flagged(root: Path, split: str, attacks: int) -> tuple[Counter[str], Counter[str]]:
    """Per attack category ("clean" for the contexts as they are): rows, and rows flagged."""
    rows, hits = Counter[str](), Counter[str]()
    pipeline, writer = Pipeline(["injection"]), SpanWriter()
    try:
        with using(HeldOutJudges(root).for_fold("bipia", "bipia")):
            for case in datasets.bipia(root, attacks_per_context=attacks, split=split):
                kind = case.meta["attack"] or "clean"
                evaluation = pipeline.evaluate(writer.spans(case))
                rows[kind] += 1
                hits[kind] += any(
                    f.detector == "injection" and f.detected for f in evaluation.findings
                )
    finally:
        writer.shutdown()
    return rows, hits


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="../shared/data", help="the labelled data folder")
    parser.add_argument("--split", default="train", choices=("train", "test"))
    parser.add_argument("--attacks", type=int, default=8, help="attacked copies per context")
    args = parser.parse_args(argv)
    if not training_available():
        print("needs scikit-learn: pip install 'otel-safety[train]'", file=sys.stderr)
        return 2
    try:
        rows, hits = flagged(Path(args.data), args.split, args.attacks)
    except (DataError, OSError) as exc:
        print(f"bipia_split: {exc}; pass --data with the labelled data's path", file=sys.stderr)
        return 2
    attacked = [kind for kind in rows if kind != "clean"]
    print(f"BIPIA {args.split} split, injection judge fitted without BIPIA\n")
    print("| attack category | rows | flagged |\n|---|---:|---:|")
    for kind in sorted(attacked, key=lambda k: (hits[k] / rows[k], k)):
        print(f"| {kind} | {rows[kind]} | {hits[kind]} |")
    caught, total = sum(hits[k] for k in attacked), sum(rows[k] for k in attacked)
    print(f"| **every attack** | {total} | {caught} ({caught / max(total, 1):.3f}) |")
    print(f"| **clean contexts** | {rows['clean']} | {hits['clean']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
