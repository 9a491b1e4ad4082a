"""Benchmark: what setting up otel-safety costs an application at start.

Each row is a fresh Python process that imports what it needs and sets up tracing, timed
from its first import to a provider ready for spans (CPU seconds, and the process's peak
resident memory). The anchor is the plain OpenTelemetry setup an app has without us: a
`TracerProvider` with a `BatchSpanProcessor` over the OTLP/HTTP exporter. otel-safety is
set up with `configure()` and a DuckDB store, judging in a worker process (the default)
and on a thread. The worker process's own start is not the app's and is not counted.
Rounds alternate the rows; medians are printed. Every row reads the same pattern cache, the
whole of it, as `otel-safety detectors --compile` leaves it (the app's process reads it for
the patterns its modules compile at import): its size, not the machine's history, is in
the memory figure.

Run: make bench   (or: python bench/bench_app_start.py --rounds 5 [--format markdown])
Figures are printed, not asserted; they depend on the machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _shared import at_least_one, child_environment, description

_MEASURE = """
import json, resource, sys, time
started = time.process_time()
{setup}
cpu = time.process_time() - started
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
modules = sum(1 for name in sys.modules if name.startswith("otel_safety"))
provider.shutdown()
print(json.dumps({{"cpu": cpu, "rss_mb": rss, "modules": modules}}))
"""

ROWS = {
    "anchor": (
        "OpenTelemetry SDK: TracerProvider + BatchSpanProcessor(OTLP/HTTP) (anchor)",
        """
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        provider = TracerProvider()
        provider.add_span_processor(
            BatchSpanProcessor(OTLPSpanExporter(endpoint="http://127.0.0.1:4318/v1/traces"))
        )
        """,
    ),
    "process": (
        "otel-safety `configure()`, detection in a worker process (default)",
        """
        import otel_safety
        provider = otel_safety.configure(db_path=sys.argv[1], detection="process")
        """,
    ),
    "thread": (
        "otel-safety `configure()`, detection on a thread",
        """
        import otel_safety
        provider = otel_safety.configure(db_path=sys.argv[1], detection="thread")
        """,
    ),
}


def filled_cache(folder: Path) -> Path:
    """A pattern cache holding every packaged pattern (`otel-safety detectors --compile`)."""
    cache = folder / "patterns"
    subprocess.run(
        [sys.executable, "-m", "otel_safety.cli", "detectors", "--compile"],
        capture_output=True,
        check=True,
        timeout=600,
        env=child_environment({"OTEL_SAFETY_PATTERN_CACHE": str(cache)}),
    )
    return cache


def measure(row: str, folder: Path, number: int, cache: Path) -> dict[str, float]:
    script = _MEASURE.format(setup=textwrap.dedent(ROWS[row][1]))
    store = folder / f"{row}-{number}.duckdb"
    done = subprocess.run(
        [sys.executable, "-c", script, str(store)],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
        # OTEL_EXPORTER_OTLP_ENDPOINT would add an exporter
        env=child_environment({"OTEL_SAFETY_PATTERN_CACHE": str(cache)}),
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("--rounds", type=at_least_one, default=5, help="fresh processes per row")
    parser.add_argument("--format", choices=("text", "markdown"), default="text")
    args = parser.parse_args()
    runs: dict[str, list[dict[str, float]]] = {row: [] for row in ROWS}
    with tempfile.TemporaryDirectory() as folder:
        cache = filled_cache(Path(folder))
        cache_bytes = sum(f.stat().st_size for f in cache.iterdir())
        for number in range(args.rounds):
            for row in ROWS:
                runs[row].append(measure(row, Path(folder), number, cache))
    median = {
        row: {key: statistics.median(r[key] for r in results) for key in results[0]}
        for row, results in runs.items()
    }
    anchor = median["anchor"]
    if args.format == "markdown":
        print(
            f"Fresh processes, medians of {args.rounds} rounds; the worker process's own "
            "start is not counted; the pattern cache filled by `otel-safety detectors "
            f"--compile` ({cache_bytes / 1e6:.1f} MB)."
        )
        print()
        print("| set-up in the app's process | CPU | vs anchor | peak memory | vs anchor |")
        print("|---|---|---|---|---|")
    for row, (label, _) in ROWS.items():
        figures = median[row]
        cpu_ratio = figures["cpu"] / anchor["cpu"]
        rss_ratio = figures["rss_mb"] / anchor["rss_mb"]
        if args.format == "markdown":
            print(
                f"| {label} | {figures['cpu']:.2f} CPU-s | {cpu_ratio:.1f}x | "
                f"{figures['rss_mb']:.0f} MB | {rss_ratio:.1f}x |"
            )
        else:
            print(
                f"{row:<8} {figures['cpu']:6.2f} CPU-s ({cpu_ratio:4.1f}x)  "
                f"{figures['rss_mb']:5.0f} MB ({rss_ratio:3.1f}x)  "
                f"otel_safety modules {figures['modules']:.0f}"
            )


if __name__ == "__main__":
    main()
