"""Benchmark: what judging costs, each figure beside an anchor measured in the same run.

0. Start-up: CPU seconds a fresh process spends importing and building every detector, and
   then judging its first trace (which compiles the packaged patterns it is the first to
   search), against importing the libraries it stands on.
1. Throughput of the full detector suite on real AgentDojo traces (spans per CPU-second),
   against the pipeline with no detectors (mapping, assembly, annotation: the floor) and
   the goal of 20,000 spans/s per core: once every pattern is compiled and with the garbage
   collector set as a detection process sets it, with the content memo cleared before the
   pass (texts repeated across traces are analysed once), with it off, with every
   apostrophe curly (texts beyond ASCII, as most models write), with CPython's collector
   settings (as on a thread in an app), and the first pass, which compiles what is
   compiled on first use.
2. One agent run with 10, 50, 200 and 1,000 tool calls through every detector (p50 / p99
   over several runs, each a new trace, its texts analysed as never seen before; the first
   run of each size apart, as it builds what RE2 and new tool names need), against
   one plain regex pass over the same texts: the per-tool-call cost shows whether growth
   is linear: once with chat spans carrying only their new messages, once with each chat
   span repeating the whole history, as SDKs send it (the input then grows with the square
   of the run; the judging should not).

Run: make bench   (or: python bench/bench_detection.py --data ../shared/data)
Figures are printed, not asserted; they depend on the machine.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import itertools
import json
import os
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import regex
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

sys.path.insert(0, str(Path(__file__).parent))
from _shared import require_data

from otel_safety.analysis import linear, memo
from otel_safety.detection_worker import tune_collector
from otel_safety.evaluation import datasets
from otel_safety.evaluation.cases import Case, SpanWriter
from otel_safety.pipeline import Pipeline

GOAL_SPANS_PER_CORE = 20_000
PASSES = 3
TRAJECTORY_SIZES = (10, 50, 200, 1000)
_ANCHOR = regex.compile(r"\bignore\b", regex.IGNORECASE)


def agentdojo_traces(data: Path, limit: int, curly: bool = False) -> list[list[ReadableSpan]]:
    """The corpus as spans; `curly`: every straight apostrophe curly, as most models write
    them, so that each message with one is beyond ASCII."""
    writer = SpanWriter()
    try:
        cases = itertools.islice(datasets.agentdojo(data), limit)
        return [writer.spans(with_curly_apostrophes(case) if curly else case) for case in cases]
    finally:
        writer.shutdown()


def with_curly_apostrophes(case: Case) -> Case:
    messages = [
        {**m, "content": m["content"].replace("'", "\u2019")}
        if isinstance(m.get("content"), str)
        else m
        for m in case.messages
    ]
    return dataclasses.replace(case, messages=messages)


def cpu_seconds(pipeline: Pipeline, traces: list[list[ReadableSpan]]) -> float:
    started = time.process_time()
    for spans in traces:
        pipeline.evaluate(spans)
    return time.process_time() - started


@contextlib.contextmanager
def restored_afterwards() -> Iterator[tuple[int, int, int]]:
    """The collector's thresholds as CPython set them (yielded), and the content memo at its
    default: both as they were once the block ends."""
    defaults = gc.get_threshold()
    try:
        yield defaults
    finally:
        memo.set_capacity(memo.DEFAULT_CAPACITY)
        gc.unfreeze()
        gc.set_threshold(*defaults)


def throughput(data: Path, limit: int) -> dict[str, Any]:
    """Spans per CPU-second once every pattern is compiled (a first pass over the corpus,
    timed on its own, compiles what is compiled on first use), with the garbage collector
    set as a detection process sets it: medians of `PASSES` passes with the content memo
    cleared before each, with it off, with every apostrophe curly, and with CPython's
    collector settings, against the pipeline with no detectors. Each pass judges the corpus
    written anew, as new traces: the monitors keep what they learnt of a trace, so a trace
    judged twice would cost them less."""
    floor, suite = Pipeline([]), Pipeline()
    rates: dict[str, list[float]] = {
        "floor": [],
        "alone": [],
        "suite": [],
        "untuned": [],
        "curly": [],
    }
    judged: list[int] = []

    def rate(pipeline: Pipeline, curly: bool = False) -> float:
        traces = agentdojo_traces(data, limit, curly)
        judged.append(len(traces))
        return sum(len(t) for t in traces) / cpu_seconds(pipeline, traces)

    with restored_afterwards() as defaults:
        memo.set_capacity(0)
        rate(floor)  # its warm-up pass
        suite.warm()  # building the detectors is the start-up row's
        tune_collector()
        first_rate = rate(suite)
        for _ in range(PASSES):  # alternated: the machine's drift falls on each alike
            rates["floor"].append(rate(floor))
            memo.set_capacity(0)
            rates["alone"].append(rate(suite))
            memo.set_capacity(memo.DEFAULT_CAPACITY)  # each set_capacity starts the memo cold
            rates["suite"].append(rate(suite))
            memo.set_capacity(memo.DEFAULT_CAPACITY)
            rates["curly"].append(rate(suite, curly=True))
            gc.unfreeze()
            gc.set_threshold(*defaults)
            memo.set_capacity(memo.DEFAULT_CAPACITY)
            rates["untuned"].append(rate(suite))
            tune_collector()
    floor_rate, alone_rate, suite_rate, untuned_rate, curly_rate = (
        statistics.median(rates[k]) for k in ("floor", "alone", "suite", "untuned", "curly")
    )
    return {
        "traces": judged[-1],
        "suite_spans_per_cpu_s": round(suite_rate),
        "suite_memo_off_spans_per_cpu_s": round(alone_rate),
        "suite_collector_untuned_spans_per_cpu_s": round(untuned_rate),
        "suite_first_pass_spans_per_cpu_s": round(first_rate),
        "suite_curly_spans_per_cpu_s": round(curly_rate),
        "anchor_no_detectors_spans_per_cpu_s": round(floor_rate),
        "suite_vs_anchor": round(suite_rate / floor_rate, 3),
        "memo_off_vs_anchor": round(alone_rate / floor_rate, 3),
        "collector_untuned_vs_anchor": round(untuned_rate / floor_rate, 3),
        "first_pass_vs_anchor": round(first_rate / floor_rate, 3),
        "curly_vs_anchor": round(curly_rate / floor_rate, 3),
        "suite_vs_goal": round(suite_rate / GOAL_SPANS_PER_CORE, 3),
    }


def spread(pool: list[tuple[str, str, str]], count: int) -> list[tuple[str, str, str]]:
    """`count` triples taken evenly across `pool`: every run size gets the same mix of
    short and long texts, so its cost per call compares with the others' (the first 200
    results of the corpus are shorter, on average, than the first 1,000), and no text is
    repeated within a run, which the per-trace analysis would judge only once."""
    step = max(1, len(pool) // count)
    return pool[::step][:count]


def tool_texts(data: Path, count: int) -> list[tuple[str, str, str]]:
    """Real (tool name, arguments, result) triples from AgentDojo, cycled as needed."""
    found: list[tuple[str, str, str]] = []
    for case in datasets.agentdojo(data):
        calls = {}
        for message in case.messages:
            for call in message.get("tool_calls") or []:
                function = call.get("function") or {}
                calls[str(call.get("id"))] = (str(function.get("name")), function.get("arguments"))
            if message.get("role") == "tool":
                name, arguments = calls.get(str(message.get("tool_call_id")), ("tool", {}))
                arguments = arguments if isinstance(arguments, str) else json.dumps(arguments)
                found.append((name, arguments, str(message.get("content") or "")))
        if len(found) >= count:
            break
    return list(itertools.islice(itertools.cycle(found), count))


def run_spans(calls: list[tuple[str, str, str]], repeat_history: bool) -> list[ReadableSpan]:
    """One agent run: a task, then model call -> tool call per triple, then an answer."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("bench")
    task = {"role": "user", "parts": [{"type": "text", "content": "Summarise my inbox."}]}
    history: list[dict[str, Any]] = [task]
    with tracer.start_as_current_span(
        "invoke_agent bench",
        attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "bench"},
    ):
        for number, (name, arguments, result) in enumerate(calls):
            call_id = f"c{number}"
            call = {
                "role": "assistant",
                "parts": [
                    {"type": "tool_call", "id": call_id, "name": name, "arguments": arguments}
                ],
            }
            sent = history if repeat_history else history[-1:]
            with tracer.start_as_current_span(
                "chat",
                attributes={
                    "gen_ai.operation.name": "chat",
                    "gen_ai.input.messages": json.dumps(sent),
                    "gen_ai.output.messages": json.dumps([call]),
                },
            ):
                pass
            with tracer.start_as_current_span(
                f"execute_tool {name}",
                attributes={
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": name,
                    "gen_ai.tool.call.id": call_id,
                    "gen_ai.tool.call.arguments": arguments,
                    "gen_ai.tool.call.result": result,
                },
            ):
                pass
            response = {
                "role": "tool",
                "parts": [{"type": "tool_call_response", "id": call_id, "response": result}],
            }
            history += [call, response]
        answer = {"role": "assistant", "parts": [{"type": "text", "content": "Done: 3 emails."}]}
        with tracer.start_as_current_span(
            "chat",
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.input.messages": json.dumps(history if repeat_history else history[-1:]),
                "gen_ai.output.messages": json.dumps([answer]),
            },
        ):
            pass
    provider.shutdown()
    return list(exporter.get_finished_spans())


def anchor_seconds(calls: list[tuple[str, str, str]]) -> float:
    """One plain regex pass over every argument and result of the run, each read to its end
    (`findall`: a search stops at its first match, and would time less than the texts)."""
    started = time.perf_counter()
    for _, arguments, result in calls:
        _ANCHOR.findall(arguments)
        _ANCHOR.findall(result)
    return time.perf_counter() - started


def trajectory_growth(data: Path, runs: int, repeat_history: bool) -> list[dict[str, Any]]:
    """Each run judges its texts as if never seen before: the runs of one size repeat the
    same calls, which the content memo would otherwise answer from the previous run. The
    collector is set as a detection process sets it."""
    with restored_afterwards():
        memo.set_capacity(0)
        return _trajectory_growth(data, runs, repeat_history)


def _trajectory_growth(data: Path, runs: int, repeat_history: bool) -> list[dict[str, Any]]:
    pipeline = Pipeline()
    pool = tool_texts(data, max(TRAJECTORY_SIZES))
    pipeline.evaluate(run_spans(pool[:3], repeat_history))
    linear.compile_pending()  # a packaged pattern's first search compiles it: not timed here
    tune_collector()  # as a detection process runs
    rows = []
    for size in TRAJECTORY_SIZES:
        calls = spread(pool, size)
        count = max(3, runs if size <= 200 else runs // 4)
        traces = [run_spans(calls, repeat_history) for _ in range(count)]
        timings, anchors = [], []
        for spans in traces:
            started = time.perf_counter()
            pipeline.evaluate(spans)
            timings.append(time.perf_counter() - started)
            anchors.append(anchor_seconds(calls))
        # The first run of a size is timed apart: RE2 builds the states of its sets' lazy
        # automata for texts of a kind it has not read yet, and the patterns for tool names
        # not met before are made (2.5-3x a later run in a process that has judged nothing
        # else; less here, after the throughput passes); p50 and p99 are the later runs'.
        first, later = timings[0], sorted(timings[1:])
        p50, p99 = (
            statistics.median(later),
            later[min(len(later) - 1, int(len(later) * 0.99))],
        )
        anchor = statistics.median(anchors)
        rows.append(
            {
                "tool_calls": size,
                "runs": count,
                "p50_ms": round(p50 * 1000, 2),
                "p99_ms": round(p99 * 1000, 2),
                "first_run_ms": round(first * 1000, 2),
                "p50_us_per_tool_call": round(p50 * 1e6 / size),
                "chars_per_tool_call": round(sum(len(a) + len(r) for _, a, r in calls) / size),
                "anchor_one_regex_ms": round(anchor * 1000, 3),
                "p50_vs_anchor": round(p50 / anchor) if anchor else None,
            }
        )
        print(f"  {size} tool calls: p50 {rows[-1]['p50_ms']} ms", file=sys.stderr)
    return rows


_BUILD = (
    "import sys, time; started = time.process_time(); "
    "import duckdb, pydantic, pydantic_settings, regex, opentelemetry.sdk.trace; "
    "imported = time.process_time(); "
    "from otel_safety.bootstrap import build_pipeline; from otel_safety.config import Settings; "
    "pipeline = build_pipeline(Settings.resolve(environ={})); "
    "pipeline.warm(); built = time.process_time(); "
    "sys.path.insert(0, sys.argv[1]); from bench_detection import agentdojo_traces; "
    "from pathlib import Path; trace, = agentdojo_traces(Path(sys.argv[2]), 1); "
    "judging = time.process_time(); pipeline.evaluate(trace); "
    "print(imported - started, built - imported, time.process_time() - judging)"
)


_LIBRARIES = "importing OpenTelemetry's SDK, pydantic, regex and DuckDB"


def start_up(data: Path, repeats: int = 3) -> dict[str, Any]:
    """CPU seconds a fresh process spends importing and building every detector (what
    `serve`, `ingest` and each detection process pay before the first trace), against
    importing the libraries it stands on (OpenTelemetry's SDK, pydantic, regex, DuckDB);
    and judging its first AgentDojo trace, which compiles the patterns it is the first to
    search (the packaged ones wait for their first search). Once with an empty pattern cache
    (the first process on a machine) and once with the cache an earlier process left."""
    import subprocess
    import tempfile

    here = str(Path(__file__).parent)
    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as folder:

        def run(cache: str) -> list[float]:
            environ = {**os.environ, "OTEL_SAFETY_PATTERN_CACHE": str(Path(folder) / cache)}
            done = subprocess.run(
                [sys.executable, "-c", _BUILD, here, str(data)],
                capture_output=True,
                text=True,
                check=True,
                env=environ,
            )
            return [float(x) for x in done.stdout.split()]

        run("warm")  # leaves the cache the warm runs read
        for cache in ("cold", "warm"):
            imports, builds, firsts = [], [], []
            for number in range(repeats):
                imported, built, first = run(f"cold-{number}" if cache == "cold" else "warm")
                imports.append(imported)
                builds.append(built)
                firsts.append(first)
            figures[cache] = {
                "build_cpu_s": round(statistics.median(builds), 2),
                "first_trace_cpu_s": round(statistics.median(firsts), 2),
                "anchor_import_cpu_s": round(statistics.median(imports), 2),
            }
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("../shared/data"))
    parser.add_argument("--traces", type=int, default=300, help="AgentDojo traces (default 300)")
    parser.add_argument("--runs", type=int, default=20, help="runs per trajectory size")
    parser.add_argument("--format", choices=("json", "markdown"), default="json")
    args = parser.parse_args()
    require_data(parser, args.data)
    print("throughput...", file=sys.stderr)
    results = {
        "start_up": start_up(args.data),
        "throughput": throughput(args.data, args.traces),
        "trajectory": trajectory_growth(args.data, args.runs, repeat_history=False),
        "trajectory_repeated_history": trajectory_growth(args.data, args.runs, True),
    }
    if args.format == "json":
        print(json.dumps(results, indent=2))
        return
    rate = results["throughput"]
    print("| figure | measured | anchor (same run) | ratio |\n|---|---|---|---|")
    for cache, said in (
        ("cold", "empty pattern cache (a machine's first)"),
        ("warm", "the pattern cache an earlier process left"),
    ):
        start = results["start_up"][cache]
        libraries = f"{_LIBRARIES}: {start['anchor_import_cpu_s']} CPU-s"
        print(
            f"| importing and building every detector, fresh process, {said} | "
            f"{start['build_cpu_s']} CPU-s | {libraries} | "
            f"{round(start['build_cpu_s'] / start['anchor_import_cpu_s'], 1)}x |"
        )
        print(
            f"| then judging its first AgentDojo trace (patterns compiled on first search) | "
            f"{start['first_trace_cpu_s']} CPU-s | {libraries} | "
            f"{round(start['first_trace_cpu_s'] / start['anchor_import_cpu_s'], 1)}x |"
        )
    anchor = f"no detectors: {rate['anchor_no_detectors_spans_per_cpu_s']:,}"
    print(
        f"| full suite, {rate['traces']} AgentDojo traces | {rate['suite_spans_per_cpu_s']:,} "
        f"spans/CPU-s | {anchor} | "
        f"{rate['suite_vs_anchor']} (goal {GOAL_SPANS_PER_CORE:,}: {rate['suite_vs_goal']}) |"
    )
    print(
        f"| the same, content memo off (`OTEL_SAFETY_ANALYSIS_CACHE=0`) | "
        f"{rate['suite_memo_off_spans_per_cpu_s']:,} spans/CPU-s | {anchor} | "
        f"{rate['memo_off_vs_anchor']} |"
    )
    print(
        f"| the same, every apostrophe curly (texts beyond ASCII, as models write them) | "
        f"{rate['suite_curly_spans_per_cpu_s']:,} spans/CPU-s | {anchor} | "
        f"{rate['curly_vs_anchor']} |"
    )
    print(
        f"| the same, CPython's collector settings (as in an app's process) | "
        f"{rate['suite_collector_untuned_spans_per_cpu_s']:,} spans/CPU-s | {anchor} | "
        f"{rate['collector_untuned_vs_anchor']} |"
    )
    print(
        f"| the same, first pass (patterns compiled on first use) | "
        f"{rate['suite_first_pass_spans_per_cpu_s']:,} spans/CPU-s | {anchor} | "
        f"{rate['first_pass_vs_anchor']} |"
    )
    growth = [("", row) for row in results["trajectory"]] + [
        (", histories repeated", row) for row in results["trajectory_repeated_history"]
    ]
    for repeated, row in growth:
        print(
            f"| {row['tool_calls']} tool calls{repeated}, all detectors | "
            f"p50 {row['p50_ms']} ms, p99 {row['p99_ms']} ms, first run "
            f"{row['first_run_ms']} ms ({row['p50_us_per_tool_call']} µs/call, "
            f"{row['chars_per_tool_call']} characters/call) | one regex: "
            f"{row['anchor_one_regex_ms']} ms | {row['p50_vs_anchor']}x |"
        )


if __name__ == "__main__":
    main()
