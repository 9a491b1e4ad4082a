"""Benchmark: what writing judged traces to the DuckDB store costs, against the floor of
writing their spans at all (measured in the same run).

AgentDojo runs from `../shared/data` are judged once (not timed), then written by the
store sink exactly as an application's engine thread writes them (`DuckDBStore.write` and
`force_flush`: open the file, insert spans, findings, traces and audit rows, close it) into a
fresh file, `--repeats` times. The anchor writes the same spans' attributes as raw JSON rows
(orjson, one INSERT) into a one-table file. CPU is the whole process's (DuckDB's threads
included): in an application that is CPU taken beside the app's own work.

`--grow` also times one write of the corpus into stores that already hold that many copies
of it (1 or more): one under the corpus's own trace ids, so the write replaces those traces
(the same traces written again), the others copied in SQL under other trace ids. A write
must not cost more as the store grows.

`--writes-of N` also writes the corpus in writes of N traces, as an app's engine writes
what it judged in the last second: the file let go after every write (the default), and
kept open between writes (`keep_open`, 3 s). Each close after a write checkpoints the file,
a cost per table written that a small write pays in full. The writes follow each other at
once, so the kept-open file is closed only at the final flush: at an app's one write a
second it would close every third write, between the two figures.

Run: python bench/bench_store.py --data ../shared/data [--traces 300] [--repeats 3]
     [--grow 1,10,100] [--writes-of 30]
Figures are printed, not asserted; they depend on the machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import duckdb
import orjson

sys.path.insert(0, str(Path(__file__).parent))
from _shared import at_least_one, description, require_data
from bench_detection import agentdojo_traces

from otel_safety import DuckDBStore, Pipeline
from otel_safety.mapping import span_id_hex, trace_id_hex

KEEP_OPEN = 3.0  # seconds, for the kept-open writes of `--writes-of`


def store_cpu(evaluations: list, path: Path) -> tuple[float, float]:
    """CPU and wall seconds for the store sink to write every evaluation to a new file."""
    store = DuckDBStore(path)
    cpu, wall = time.process_time(), time.perf_counter()
    store.write(evaluations)
    store.force_flush()
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    store.shutdown()
    return cpu, wall


def anchor_cpu(evaluations: list, path: Path) -> tuple[float, float]:
    """The floor: each span's ids and attributes as one JSON row, inserted in one go."""
    cpu, wall = time.process_time(), time.perf_counter()
    rows = [
        {
            "trace_id": trace_id_hex(span.context.trace_id),
            "span_id": span_id_hex(span.context.span_id),
            "attributes": dict(span.attributes or {}),
        }
        for evaluation in evaluations
        for span in evaluation.spans
    ]
    rows_path = path.with_suffix(".json")
    rows_path.write_bytes(orjson.dumps(rows, default=str))
    with duckdb.connect(str(path)) as con:
        con.execute("CREATE TABLE spans (trace_id VARCHAR, span_id VARCHAR, attributes JSON)")
        con.execute(
            "INSERT INTO spans SELECT * FROM read_json($path, format = 'array', columns = "
            "{'trace_id': 'VARCHAR', 'span_id': 'VARCHAR', 'attributes': 'JSON'})",
            {"path": str(rows_path)},
        )
    return time.process_time() - cpu, time.perf_counter() - wall


def small_writes(evaluations: list, path: Path, size: int, keep_open: float) -> float:
    """CPU seconds to write every evaluation, `size` traces a write, into a new file."""
    store = DuckDBStore(path, write_interval=0.0, keep_open=keep_open)
    cpu = time.process_time()
    for start in range(0, len(evaluations), size):
        store.write(evaluations[start : start + size])
    store.force_flush()
    cpu = time.process_time() - cpu
    store.shutdown()
    return cpu


def grow(evaluations: list, path: Path, copies: int) -> int:
    """Make `path` a store holding `copies` (1 or more) copies of `evaluations`: one written by
    the store under their own trace ids, `copies - 1` copied in SQL under other trace ids.
    Returns the spans it holds."""
    if copies < 1:
        raise ValueError(f"a grown store holds at least one copy, not {copies}")
    store = DuckDBStore(path)
    store.write(evaluations)
    store.shutdown()
    with duckdb.connect(str(path)) as con:
        for table in ("spans", "findings", "traces", "audit"):
            con.execute(
                f"INSERT INTO {table} SELECT {table}.* REPLACE (trace_id || '-' || copy AS "
                f"trace_id) FROM {table}, range({copies - 1}) AS copies(copy)"
            )
        return con.execute("SELECT count(*) FROM spans").fetchone()[0]


def grown_write(evaluations: list, path: Path, copies: int) -> dict[str, Any]:
    """One write of `evaluations` into a store already holding `copies` of them (`grow`)."""
    rows = grow(evaluations, path, copies)
    cpu, wall = store_cpu(evaluations, path)
    spans = sum(len(e.spans) for e in evaluations)
    return {
        "copies": copies,
        "store_spans": rows,
        "write_cpu_s": cpu,
        "write_cpu_ms_per_span": round(cpu * 1000 / spans, 3),
        "write_wall_s": round(wall, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("--data", type=Path, required=True, help="the shared data folder")
    parser.add_argument("--traces", type=at_least_one, default=300, help="AgentDojo runs to write")
    parser.add_argument(
        "--repeats", type=at_least_one, default=3, help="writes per figure (median)"
    )
    parser.add_argument("--format", choices=("json", "markdown"), default="json")
    parser.add_argument(
        "--grow",
        default="",
        help="comma-separated copies of the corpus (each 1 or more) already in the store a "
        "write goes into",
    )
    parser.add_argument(
        "--writes-of", type=int, default=0, help="also write the corpus N traces a write"
    )
    args = parser.parse_args()
    try:
        grow_to = [int(copies) for copies in args.grow.split(",") if copies.strip()]
    except ValueError:
        parser.error(f"--grow takes counts separated by commas, not {args.grow!r}")
    if grow_to and min(grow_to) < 1:
        parser.error("--grow: every count must be at least 1 (the first row is the empty store)")
    require_data(parser, args.data)
    traces = agentdojo_traces(args.data, args.traces)
    print(f"judging {len(traces)} traces (not timed)...", file=sys.stderr)
    evaluations = Pipeline().evaluate_many([(spans, "root_ended") for spans in traces])
    spans = sum(len(e.spans) for e in evaluations)
    findings = sum(len(e.findings) for e in evaluations)
    store, anchor = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(args.repeats):
            store.append(store_cpu(evaluations, Path(tmp) / f"store-{repeat}.duckdb"))
            anchor.append(anchor_cpu(evaluations, Path(tmp) / f"anchor-{repeat}.duckdb"))
        grown = [
            grown_write(evaluations, Path(tmp) / f"grown-{copies}.duckdb", copies)
            for copies in grow_to
        ]
        small = {}
        for keep_open in (0.0, KEEP_OPEN) if args.writes_of else ():
            files = [Path(tmp) / f"small-{keep_open:g}-{r}.duckdb" for r in range(args.repeats)]
            small[keep_open] = statistics.median(
                small_writes(evaluations, file, args.writes_of, keep_open) for file in files
            )
    store_cpu_s = statistics.median(cpu for cpu, _ in store)
    anchor_cpu_s = statistics.median(cpu for cpu, _ in anchor)
    result: dict[str, Any] = {
        "traces": len(evaluations),
        "spans": spans,
        "findings": findings,
        "store_cpu_ms_per_span": round(store_cpu_s * 1000 / spans, 3),
        "store_wall_s": round(statistics.median(wall for _, wall in store), 3),
        "anchor_raw_insert_cpu_ms_per_span": round(anchor_cpu_s * 1000 / spans, 3),
        "store_vs_anchor": round(store_cpu_s / anchor_cpu_s, 2),
    }
    for row in grown:
        row["write_vs_anchor"] = round(row.pop("write_cpu_s") / anchor_cpu_s, 2)
    if grown:
        result["write_into_a_grown_store"] = grown
    if small:
        result[f"writes_of_{args.writes_of}_traces"] = {
            f"keep_open_{keep_open:g}_s": {
                "cpu_ms_per_span": round(cpu * 1000 / spans, 3),
                "vs_anchor": round(cpu / anchor_cpu_s, 2),
            }
            for keep_open, cpu in small.items()
        }
    if args.format == "json":
        print(json.dumps(result, indent=2))
        return
    print(
        f"{result['traces']} AgentDojo traces, {spans:,} spans, {findings:,} findings\n\n"
        "| write | store already holds | CPU per span | vs anchor |\n|---|---|---|---|\n"
        f"| anchor: raw JSON rows, one INSERT | 0 spans | "
        f"{result['anchor_raw_insert_cpu_ms_per_span']} ms | 1.0 |\n"
        f"| DuckDBStore (all tables) | 0 spans | {result['store_cpu_ms_per_span']} ms | "
        f"{result['store_vs_anchor']} |"
    )
    for row in grown:
        print(
            f"| DuckDBStore, the same traces again | {row['store_spans']:,} spans "
            f"({row['copies']} {'copy' if row['copies'] == 1 else 'copies'}) | "
            f"{row['write_cpu_ms_per_span']} ms | {row['write_vs_anchor']} |"
        )
    for keep_open, cpu in small.items():
        how = "let go after each" if not keep_open else f"kept open up to {keep_open:g} s"
        print(
            f"| DuckDBStore, writes of {args.writes_of} traces, file {how} | 0 spans | "
            f"{round(cpu * 1000 / spans, 3)} ms | {round(cpu / anchor_cpu_s, 2)} |"
        )


if __name__ == "__main__":
    main()
