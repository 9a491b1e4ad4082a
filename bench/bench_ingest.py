"""Benchmark: `otel-safety ingest` as a user runs it, with one and with several detection
processes, against the same command judging in its own process (measured in the same run).

AgentDojo runs from `../shared/data` are written as an OTLP/JSON file (one request per
trace, as the Collector's file exporter writes them), then ingested into a fresh DuckDB file
by the real command, once per `--workers` value ("auto": the option left out, so the
command picks: one per core, fewer for a small file). Each run reports wall time, spans per
wall-second and CPU seconds of the command and its children; the ratio is against
`--workers 0` (everything in one process) on the same file. Start-up (building the
detectors) is included: it is what a user waits for, and on a small file it is most of it.
An untimed first ingest leaves the compiled patterns in a cache folder of the run's own, as
a user's earlier run leaves them in theirs (`bench_detection.py` times a first start).

Run: python bench/bench_ingest.py --data ../shared/data [--traces 10,600] [--workers 0,1,2,auto]
Figures are printed, not asserted; they depend on the machine and on what else runs on it.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from google.protobuf.json_format import MessageToDict
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

sys.path.insert(0, str(Path(__file__).parent))
from _shared import child_environment, description, failure, require_data
from bench_detection import agentdojo_traces

_IDS = ("traceId", "spanId", "parentSpanId")


def write_corpus(data: Path, traces: int, path: Path) -> int:
    """The AgentDojo traces as OTLP/JSON lines (ids in hex, as OTLP/JSON wants them)."""
    spans = 0
    with path.open("w", encoding="utf-8") as out:
        for trace in agentdojo_traces(data, traces):
            spans += len(trace)
            document = MessageToDict(encode_spans(trace))
            for resource_spans in document["resourceSpans"]:
                for scope_spans in resource_spans["scopeSpans"]:
                    for span in scope_spans["spans"]:
                        for key in _IDS:
                            if key in span:
                                span[key] = base64.b64decode(span[key]).hex()
            out.write(json.dumps(document) + "\n")
    return spans


def ingest(corpus: Path, workers: str, folder: Path) -> dict[str, Any]:
    db = folder / f"ingest-{corpus.stem}-{workers}.duckdb"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    command = [sys.executable, "-m", "otel_safety.cli", "ingest", str(corpus), "--db", str(db)]
    chosen = [] if workers == "auto" else ["--workers", workers]
    result = subprocess.run(
        [*command, "--quiet", *chosen],
        capture_output=True,
        text=True,
        env=child_environment({"OTEL_SAFETY_PATTERN_CACHE": str(folder / "patterns")}),
    )
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        raise SystemExit(failure(f"ingest --workers {workers}", result))
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"workers": workers, "wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "out": result}


def main() -> None:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("--data", type=Path, default=Path("../shared/data"))
    parser.add_argument(
        "--traces", default="10,600", help="AgentDojo traces per file, comma-separated"
    )
    parser.add_argument("--workers", default=f"0,1,{os.cpu_count() or 1},auto")
    parser.add_argument("--format", choices=("markdown", "json"), default="markdown")
    args = parser.parse_args()
    require_data(parser, args.data)
    try:
        sizes = [int(n) for n in args.traces.split(",")]
    except ValueError:
        parser.error(f"--traces takes counts separated by commas, not {args.traces!r}")
    if not sizes or min(sizes) < 1:
        parser.error(f"--traces: every count must be at least 1, not {args.traces!r}")
    choices = list(dict.fromkeys(["0", *(w.strip() for w in args.workers.split(","))]))
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        for traces in sizes:
            corpus = folder / f"agentdojo-{traces}.jsonl"
            spans = write_corpus(args.data, traces, corpus)
            megabytes = corpus.stat().st_size / 1e6
            print(f"{spans} spans in {traces} traces; ingesting...", file=sys.stderr)
            if traces == sizes[0]:  # as a user's second run finds it (bench_detection
                ingest(corpus, "0", folder)  # times a machine's first start)
            runs = []
            for workers in choices:
                run = ingest(corpus, workers, folder)
                print(f"  --workers {workers}: {run['wall_s']} s", file=sys.stderr)
                runs.append(run)
            anchor = runs[0]  # --workers 0
            rows.extend(
                {
                    "traces": traces,
                    "spans": spans,
                    "megabytes": round(megabytes, 1),
                    "workers": r["workers"],
                    "wall_s": r["wall_s"],
                    "spans_per_wall_s": round(spans / r["wall_s"]),
                    "cpu_s": r["cpu_s"],
                    "speed_vs_one_process": round(anchor["wall_s"] / r["wall_s"], 2),
                }
                for r in runs
            )
    if args.format == "json":
        print(json.dumps({"cpus": os.cpu_count(), "runs": rows}, indent=2))
        return
    print(
        f"| file ({os.cpu_count()} CPUs) | `ingest --workers` | wall | spans/s | CPU s | "
        "speed vs `--workers 0` (same file) |"
    )
    print("|---|---|---|---|---|---|")
    for row in rows:
        print(
            f"| {row['traces']} AgentDojo traces, {row['spans']} spans, {row['megabytes']} MB "
            f"| {row['workers']} | {row['wall_s']} s | {row['spans_per_wall_s']:,} | "
            f"{row['cpu_s']} | {row['speed_vs_one_process']}x |"
        )


if __name__ == "__main__":
    main()
