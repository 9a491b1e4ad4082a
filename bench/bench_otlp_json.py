"""Benchmark: reading OTLP/JSON with `read_otlp_json` against the protobuf path it replaced
(`json.loads`, `request_from_json`, `spans_from_request` on every line), in the same run, on
the same file; with `--before REV`, also against `read_otlp_json` as it was at that revision.

AgentDojo runs from `../shared/data` are written as an OTLP/JSON file (one request per trace,
as the Collector's file exporter writes them; or pass `--corpus` to read an existing file).
The earlier reader is that revision's `otel_safety/otlp.py`, loaded from git as a separate
module. All read the file in turns, `--rounds` times each; best and median wall seconds are
reported, with the parse step alone (`json.loads` against pydantic-core's `from_json`) for
reference. Before timing, the readers' output is compared batch by batch (errors and the
OTLP/JSON re-encoding of every span), so a faster reader that reads differently fails loudly.

Run: python bench/bench_otlp_json.py [--data ../shared/data] [--traces 600] [--before REV]
Figures are printed, not asserted; they depend on the machine and on what else runs on it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
import types
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from pydantic_core import from_json

sys.path.insert(0, str(Path(__file__).parent))
from _shared import at_least_one, description, require_data
from bench_ingest import write_corpus

from otel_safety import otlp
from otel_safety.otlp import Batch, request_from_json, request_to_json, spans_from_request

ROOT = Path(__file__).resolve().parents[1]


def earlier_reader(revision: str) -> types.ModuleType:
    """`otel_safety/otlp.py` as it was at `revision`, as a module of its own."""
    source = subprocess.run(
        ["git", "show", f"{revision}:otel_safety/otlp.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    module = types.ModuleType(f"otlp_at_{revision}")
    module.__file__ = f"{revision}:otel_safety/otlp.py"
    sys.modules[module.__name__] = module  # dataclasses look their module up while defining
    exec(compile(source, module.__file__, "exec"), module.__dict__)
    return module


def read_through_protobuf(path: Path) -> list[Batch]:
    """Each line as `ingest` read it before: `json.loads`, protobuf's ParseDict, then spans."""
    batches = []
    for number, data in enumerate(path.read_bytes().splitlines(), start=1):
        if data.strip():
            problems: list[str] = []
            request = request_from_json(json.loads(otlp._text(data)))
            spans = spans_from_request(request, problems)
            error = f"line {number}: {'; '.join(problems)}" if problems else None
            batches.append(Batch(str(path), number, spans, error, 0))
    return batches


def fingerprint(batches: Iterable[Any]) -> list[tuple[int, str | None, str]]:
    """Each batch's line, error and spans as OTLP/JSON: equal only if every field is."""
    return [
        (batch.line, batch.error, json.dumps(request_to_json(batch.spans), sort_keys=True))
        for batch in batches
    ]


def seconds(run: Callable[[], object]) -> float:
    started = time.perf_counter()
    run()
    return time.perf_counter() - started


def timings(runs: dict[str, Callable[[], object]], rounds: int) -> dict[str, list[float]]:
    """Every run once per round, in turns, so a slow spell of the machine hits all of them."""
    measured: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            measured[name].append(seconds(run))
    return measured


def main() -> None:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("--data", type=Path, default=Path("../shared/data"))
    parser.add_argument("--traces", type=at_least_one, default=600, help="AgentDojo traces (600)")
    parser.add_argument("--corpus", type=Path, help="an existing OTLP/JSON file to read instead")
    parser.add_argument("--before", help="also time read_otlp_json at this git revision")
    parser.add_argument("--rounds", type=at_least_one, default=5)
    args = parser.parse_args()
    if args.corpus is None:
        require_data(parser, args.data, " (or --corpus FILE)")
    elif not args.corpus.is_file():
        parser.error(f"no file {args.corpus} (--corpus)")

    with tempfile.TemporaryDirectory(prefix="otel-safety-bench-json-") as folder:
        corpus = args.corpus or Path(folder) / "corpus.jsonl"
        if args.corpus is None:
            write_corpus(args.data, args.traces, corpus)
        readers: dict[str, Callable[[], list[Any]]] = {
            "protobuf path (json.loads, ParseDict)": lambda: read_through_protobuf(corpus),
            "read_otlp_json now": lambda: list(otlp.read_otlp_json(corpus)),
        }
        if args.before:
            before = earlier_reader(args.before)
            readers[f"read_otlp_json at {args.before}"] = lambda: list(
                before.read_otlp_json(corpus)
            )
        batches = readers["read_otlp_json now"]()
        for name, read in readers.items():
            if fingerprint(read()) != fingerprint(batches):
                raise SystemExit(f"{name} reads {corpus} differently; nothing timed")
        spans = sum(len(batch.spans) for batch in batches)
        size = corpus.stat().st_size
        texts = [otlp._text(line) for line in corpus.read_bytes().splitlines() if line.strip()]
        parsers: dict[str, Callable[[], list[Any]]] = {
            "parse only: json.loads": lambda: [json.loads(text) for text in texts],
            "parse only: pydantic_core.from_json": lambda: [
                from_json(text, cache_strings="keys") for text in texts
            ],
        }
        measured = timings({**readers, **parsers}, args.rounds)
    print(f"{len(texts)} lines, {spans} spans, {size / 1e6:.1f} MB")
    print(f"best and median of {args.rounds} rounds, taken in turns\n")
    print("| run | best s | median s | spans/s (best) |")
    print("|---|---:|---:|---:|")
    for name, values in measured.items():
        best = min(values)
        print(f"| {name} | {best:.3f} | {statistics.median(values):.3f} | {spans / best:,.0f} |")
    now = min(measured["read_otlp_json now"])
    print()
    for name in readers:
        if name != "read_otlp_json now":
            old = min(measured[name])
            print(f"read_otlp_json now: {now / old:.2f} of the time of {name} ({old / now:.1f}x)")


if __name__ == "__main__":
    main()
