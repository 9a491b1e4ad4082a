"""Benchmark: what otel-safety costs the observed application, against BatchSpanProcessor.

An application thread makes agent runs (an agent span, chat spans of ~2 KB of GenAI
messages, tool spans) as fast as it can while the span processor works behind it. For each
processor the figure is the application's own spans per second, and the CPU time spent in
the application's process and in its children (the detection worker):

- anchor: the SDK's BatchSpanProcessor with an exporter that drops everything;
- otel-safety judging on the engine's thread (`detection="thread"`);
- otel-safety judging in a worker process (`detection="process"`, the default);
- the same with a queue of 4,096 spans, full within a fraction of a
  second: what the app pays once the queue is full and spans are dropped, where the default
  queue (65,536 spans) is still filling during the run. While it fills, the app's garbage
  collector walks every span waiting in it at each full collection;
- the worker process at the app's own priority (`detection_nice=0`): by default it runs ten
  nice levels below. With `--apps 2` (as many app processes as cores, as a pre-fork server
  runs them) every row runs that many apps at once and sums their spans/s: each app's worker
  then competes with the apps for the cores, and the row shows what its lower priority buys.

Each processor is measured in several rounds (`--rounds`), each against the anchor of its own
round, and the medians are printed: one short run moves by a third on a busy VM. With
`--seconds 4` or so, a second table shows the app's spans second by second: slow while the
default queue fills, close to the anchor once it is full. `--no-gc` turns the app's garbage
collector off during the runs, which shows what the spans waiting in the queue cost it;
`--rows anchor,process` runs only those.

Run: make bench   (or: python bench/bench_app_overhead.py --seconds 10)
Figures are printed, not asserted; they depend on the machine.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from otel_safety import create_processor

SMALL_QUEUE = 4096
_ANSWER = "Here is the summary of the README you asked for. " * 20  # ~1 KB


class _Dropping(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def agent_run(tracer, number: int) -> int:
    """One agent run; returns the number of spans it made."""
    history = [
        {"role": "user", "parts": [{"type": "text", "content": f"Summarise README {number}"}]},
        {"role": "assistant", "parts": [{"type": "text", "content": _ANSWER}]},
    ]
    command = "rm -rf build" if number % 5 == 0 else "cat README.md"
    with tracer.start_as_current_span(
        "invoke_agent bench",
        attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "bench"},
    ):
        with tracer.start_as_current_span(
            "chat",
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.input.messages": json.dumps(history),
                "gen_ai.output.messages": json.dumps(history[-1:]),
            },
        ):
            pass
        with tracer.start_as_current_span(
            "execute_tool run_shell",
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "run_shell",
                "gen_ai.tool.call.arguments": json.dumps({"command": command}),
                "gen_ai.tool.call.result": "ok",
            },
        ):
            pass
    return 3


def cpu(processor: SpanProcessor) -> tuple[float, float]:
    """CPU seconds of this process, and of the detection worker while it runs."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    child = getattr(getattr(getattr(processor, "engine", None), "pipeline", None), "_child", None)
    return own.ru_utime + own.ru_stime, _process_cpu(child.pid) if child is not None else 0.0


def _process_cpu(pid: int) -> float:
    """utime + stime of a live process, from /proc (Linux)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(name: str, processor: SpanProcessor, seconds: float, collect: bool = True) -> dict:
    """The app's run with `processor`; `collect=False` turns the app's garbage collector off
    for the run, to show its share."""
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("bench")
    for number in range(20):  # warm: imports, first traces, the worker's start
        agent_run(tracer, number)
    provider.force_flush(300_000)
    own_before, children_before = cpu(processor)
    if not collect:
        gc.disable()
    spans, started = 0, time.perf_counter()
    number, per_second, second_ends, in_second = 0, [], started + 1, 0
    while (now := time.perf_counter()) - started < seconds:
        if now >= second_ends:
            per_second.append(in_second)
            second_ends, in_second = second_ends + 1, 0
        made = agent_run(tracer, number)
        spans, in_second, number = spans + made, in_second + made, number + 1
    elapsed = time.perf_counter() - started
    gc.enable()
    last = started + elapsed - (second_ends - 1)  # the run's last, maybe shorter, second
    if last >= 0.5:
        per_second.append(in_second / last)
    provider.force_flush(600_000)  # what the app process and the worker spent on them
    drained = time.perf_counter() - started
    own_after, children_after = cpu(processor)
    provider.shutdown()
    return {
        "processor": name,
        "app_spans_per_s": round(spans / elapsed),
        "per_second": per_second,  # the app's spans in each whole second of the run
        "spans": spans,
        "drained_s": round(drained, 1),
        "app_process_cpu_ms_per_span": round((own_after - own_before) * 1000 / spans, 3),
        "worker_cpu_ms_per_span": round((children_after - children_before) * 1000 / spans, 3),
    }


# (the row's key for --rows, its name, detection, queue_size, detection_nice); detection
# None: the anchor; detection_nice None: the default
PROCESSORS: list[tuple[str, str, str | None, int | None, int | None]] = [
    ("anchor", "BatchSpanProcessor (anchor)", None, None, None),
    ("thread", "otel-safety, detection=thread", "thread", None, None),
    ("process", "otel-safety, detection=process", "process", None, None),
    (
        "small",
        f"otel-safety, detection=process, queue_size={SMALL_QUEUE:,}",
        "process",
        SMALL_QUEUE,
        None,
    ),
    ("same_priority", "otel-safety, detection=process, detection_nice=0", "process", None, 0),
]


def measure_one(index: int, seconds: float, folder: str, collect: bool) -> dict:
    """One processor's row; run in a process of its own (`--one`)."""
    _, name, detection, queue_size, _ = PROCESSORS[index]
    if detection is None:
        return measure(name, BatchSpanProcessor(_Dropping()), seconds, collect)
    processor = create_processor(
        str(Path(folder) / "store.duckdb"),
        otlp=False,
        detection=detection,
        queue_size=queue_size,
    )
    row = measure(name, processor, seconds, collect)
    row["dropped"] = processor.engine.stats["spans_dropped"]
    return row


def one_round(
    seconds: float, folder: str, number: int, keys: list[str], collect: bool, apps: int = 1
) -> list[dict]:
    """The anchor, then otel-safety judging on a thread and in a worker process, each beside
    the anchor measured in the same round. Each runs in a fresh Python process (`apps` of
    them at once): judging on a thread loads every detector into the process, and a larger
    heap makes every later full garbage collection slower, which would be charged to the rows
    after it."""
    rows = []
    for index, (key, name, _, _, nice) in enumerate(PROCESSORS):
        if key not in keys:
            continue
        print(f"round {number + 1}: {name}...", file=sys.stderr)
        command = [sys.executable, __file__, "--one", str(index), "--seconds", str(seconds)]
        if not collect:
            command.append("--no-gc")
        env = dict(os.environ)
        if nice is not None:
            env["OTEL_SAFETY_DETECTION_NICE"] = str(nice)
        running = []
        for copy in range(apps):
            here = Path(folder) / f"{number}-{index}-{copy}"
            here.mkdir()
            running.append(
                subprocess.Popen(
                    command,
                    cwd=here,
                    env=env,
                    stdout=subprocess.PIPE,
                    text=True,
                )
            )
        outputs = [app.communicate()[0] for app in running]
        if any(app.returncode for app in running):
            raise SystemExit(f"a run of {name} failed; its error is above")
        rows.append(_together([json.loads(out) for out in outputs]))
    for row in rows:
        row["app_vs_anchor"] = round(row["app_spans_per_s"] / rows[0]["app_spans_per_s"], 3)
    return rows


def _together(apps: list[dict]) -> dict:
    """The rows of apps run at once as one: spans summed, CPU per span averaged over every
    span, the slowest drain."""
    if len(apps) == 1:
        return apps[0]
    spans = sum(app["spans"] for app in apps)
    row = {
        "processor": apps[0]["processor"],
        "app_spans_per_s": sum(app["app_spans_per_s"] for app in apps),
        "per_second": [sum(s) for s in zip(*(app["per_second"] for app in apps), strict=False)],
        "spans": spans,
        "drained_s": max(app["drained_s"] for app in apps),
    }
    for key in ("app_process_cpu_ms_per_span", "worker_cpu_ms_per_span"):
        row[key] = round(sum(app[key] * app["spans"] for app in apps) / spans, 3)
    if "dropped" in apps[0]:
        row["dropped"] = sum(app["dropped"] for app in apps)
    return row


def medians(rounds: list[list[dict]]) -> list[dict]:
    """Per processor, the median of each figure over the rounds, and the spread of the ratio
    (an app's spans/s on this VM moves by a third between identical one-second runs)."""
    out = []
    for rows in zip(*rounds, strict=True):
        row = {"processor": rows[0]["processor"], "rounds": len(rows)}
        for key in rows[0]:
            if key == "per_second":  # second by second, as far as every round got
                seconds = zip(*(r[key] for r in rows), strict=False)
                row[key] = [statistics.median(s) for s in seconds]
            elif key != "processor":
                row[key] = statistics.median(r[key] for r in rows)
        ratios = sorted(r["app_vs_anchor"] for r in rows)
        row["app_vs_anchor_range"] = [ratios[0], ratios[-1]]
        out.append(row)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.0, help="app run per processor")
    parser.add_argument(
        "--rounds", type=int, default=3, help="rounds of every row, medians reported (default 3)"
    )
    parser.add_argument("--format", choices=("json", "markdown"), default="json")
    parser.add_argument(
        "--rows",
        default=",".join(key for key, *_ in PROCESSORS),
        help="processors to run, of: "
        + ", ".join(key for key, *_ in PROCESSORS)
        + " (the anchor always runs)",
    )
    parser.add_argument(
        "--no-gc",
        action="store_true",
        help="turn the app's garbage collector off during each run, to show its share",
    )
    parser.add_argument(
        "--apps",
        type=int,
        default=1,
        help="app processes run at once for every row, their spans/s summed (default 1; "
        "as many as cores shows the worker competing with the apps for them)",
    )
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # a round's one row
    args = parser.parse_args()
    if args.one is not None:
        row = measure_one(args.one, args.seconds, os.getcwd(), collect=not args.no_gc)
        print(json.dumps(row))
        return
    keys = ["anchor", *(k.strip() for k in args.rows.split(",") if k.strip() != "anchor")]
    unknown = set(keys) - {key for key, *_ in PROCESSORS}
    if unknown:
        parser.error(f"unknown --rows: {', '.join(sorted(unknown))}")
    collect = not args.no_gc
    with tempfile.TemporaryDirectory() as tmp:
        rounds = [
            one_round(args.seconds, tmp, n, keys, collect, max(1, args.apps))
            for n in range(max(1, args.rounds))
        ]
        rows = medians(rounds)
    if args.format == "json":
        print(json.dumps(rows, indent=2))
        return
    together = f"{args.apps} app processes at once, spans/s summed; " if args.apps > 1 else ""
    print(
        f"{together}Medians of {rows[0]['rounds']} rounds; vs anchor: the ratio to the anchor "
        "measured in the same round, [lowest-highest] over the rounds.\n"
    )
    print(
        "| processor | app spans/s | vs anchor | app-process CPU per span | worker CPU per span "
        "| all judged after | spans dropped |\n|---|---|---|---|---|---|---|"
    )
    for row in rows:
        low, high = row["app_vs_anchor_range"]
        dropped = f"{round(row['dropped']):,}" if "dropped" in row else "-"
        print(
            f"| {row['processor']} | {round(row['app_spans_per_s']):,} | "
            f"{round(row['app_vs_anchor'], 3)} [{low}-{high}] | "
            f"{round(row['app_process_cpu_ms_per_span'], 3)} ms | "
            f"{round(row['worker_cpu_ms_per_span'], 3)} ms | {round(row['drained_s'], 1)} s | "
            f"{dropped} |"
        )
    if len(rows[0]["per_second"]) >= 2:
        _print_seconds(rows)


def _print_seconds(rows: list[dict]) -> None:
    """Second by second: a growing queue costs the app more than a full one."""
    anchor = rows[0]["per_second"]
    count = min(len(row["per_second"]) for row in rows)
    print(
        "\nThe app's spans in each second of the run (medians over the rounds), and the ratio "
        "to the anchor's same second:\n"
    )
    print("| processor | " + " | ".join(f"second {n + 1}" for n in range(count)) + " |")
    print("|---|" + "---|" * count)
    for row in rows:
        cells = [
            f"{round(made):,} ({made / anchor[n]:.2f})"
            for n, made in enumerate(row["per_second"][:count])
        ]
        print(f"| {row['processor']} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
