"""Every finding of every labelled case, written down so that two checkouts can be compared.

A change meant to leave detection alone (a module moved, a loop made faster) is checked by
judging the same cases before and after and comparing what each detector said: whether it
fired, its score, its level and its explanation. Span ids are random per run, so they are
left out. `digest` writes one JSON line per case; `compare` says how many cases differ per
dataset and shows the first few. A blind agent-run set (`datasets.NEVER_READ`), or a blind
synthetic one (`datasets.NEVER_READ_SYNTHETIC`), is only counted: its rows are not shown.

Run (the `otel_safety` Python imports is the one judged: the installed one, or a checkout put
first with PYTHONPATH=/path/to/checkout):
    python tools/findings_digest.py digest --data ../shared/data --out before.jsonl [--sample N]
    python tools/findings_digest.py compare before.jsonl after.jsonl [--show 5]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import otel_safety
from otel_safety.evaluation import datasets
from otel_safety.evaluation.cases import Case, SpanWriter
from otel_safety.pipeline import Pipeline

_SPAN_ID = re.compile(r"\b[0-9a-f]{16}\b")  # span ids quoted in explanations


def digest(cases: Iterable[Case]) -> Iterable[dict[str, Any]]:
    """Each case judged by the pipeline of the checkout at hand, as one comparable record."""
    writer, pipeline = SpanWriter(), Pipeline()
    try:
        for case in cases:
            judged = pipeline.evaluate(writer.spans(case))
            yield {
                "dataset": case.dataset,
                "set": case.meta.get("set"),
                "id": case.case_id,
                "level": judged.level.name,
                "findings": sorted(
                    [
                        f.detector,
                        f.detected,
                        f.score,
                        f.escalation.name,
                        _SPAN_ID.sub("<span>", f.explanation or ""),
                    ]
                    for f in judged.findings
                ),
            }
    finally:
        writer.shutdown()


def compare(before: list[dict], after: list[dict], show: int = 5) -> tuple[Counter, list[str]]:
    """Differing cases per dataset (per set for agent runs), and the first `show` differences
    of sets that may be read."""
    if [r["id"] for r in before] != [r["id"] for r in after]:
        raise SystemExit("the two digests hold different cases; digest the same data and --sample")
    differing: Counter[str] = Counter()
    shown: list[str] = []
    for old, new in zip(before, after, strict=True):
        if old == new:
            continue
        blind = (
            old.get("set") in datasets.NEVER_READ or old["dataset"] in datasets.NEVER_READ_SYNTHETIC
        )
        differing[old.get("set") or old["dataset"]] += 1
        if blind or len(shown) >= show:
            continue
        gone = [f for f in old["findings"] if f not in new["findings"]]
        came = [f for f in new["findings"] if f not in old["findings"]]
        shown.append(f"{old['id']}: {old['level']} -> {new['level']}; was {gone}; now {came}")
    return differing, shown


def _read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    verbs = parser.add_subparsers(dest="verb", required=True)
    write = verbs.add_parser("digest", help="judge the labelled cases and write their findings")
    write.add_argument("--data", type=Path, required=True, help="the shared data folder")
    write.add_argument("--out", type=Path, required=True, help="the JSON-lines file to write")
    write.add_argument("--sample", type=int, help="only this many cases per dataset")
    check = verbs.add_parser("compare", help="how many cases two digests disagree on")
    check.add_argument("before", type=Path)
    check.add_argument("after", type=Path)
    check.add_argument("--show", type=int, default=5, help="differences shown (default 5)")
    args = parser.parse_args(argv)
    if args.verb == "digest":
        try:
            cases = datasets.load(args.data)
        except datasets.DataError as exc:
            print(exc, file=sys.stderr)
            return 1
        if args.sample:
            cases = datasets.sample(cases, args.sample)
        count = 0
        with args.out.open("w", encoding="utf-8") as out:
            for count, record in enumerate(digest(cases), 1):
                out.write(json.dumps(record) + "\n")
                if count % 500 == 0:
                    print(f"{count} of {len(cases)} cases judged", file=sys.stderr)
        print(
            f"{count} cases judged by {Path(otel_safety.__file__).parent} written to {args.out}",
            file=sys.stderr,
        )
        return 0
    before, after = _read(args.before), _read(args.after)
    differing, shown = compare(before, after, args.show)
    for line in shown:
        print(line)
    total = sum(differing.values())
    detail = ", ".join(f"{name} {n}" for name, n in sorted(differing.items()))
    print(f"{len(before)} cases; {total} differ" + (f" ({detail})" if detail else ""))
    return 1 if total else 0


if __name__ == "__main__":
    raise SystemExit(main())
