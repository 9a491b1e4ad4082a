"""Benchmarks: the application's cost per span (on_end) and the pipeline's throughput.

Run: make bench   (or: python bench/bench_pipeline.py --traces 2000)
Figures are printed, not asserted; they depend on the machine.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import tempfile
import time
from pathlib import Path

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_safety import (
    DuckDBStore,
    Pipeline,
    SafetyEngine,
    SafetySpanProcessor,
    create_processor,
)


def make_traces(count: int) -> list:
    """Realistic agent runs (agent, chat, tool, chat), every fifth one escalating."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("bench")
    for i in range(count):
        command = "rm -rf build" if i % 5 == 0 else "cat README.md"
        user = [{"role": "user", "parts": [{"type": "text", "content": "Summarize the README"}]}]
        call = {
            "type": "tool_call",
            "id": "c1",
            "name": "run_shell",
            "arguments": {"command": command},
        }
        with tracer.start_as_current_span(
            "invoke_agent bench",
            attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "bench"},
        ):
            with tracer.start_as_current_span(
                "chat",
                attributes={
                    "gen_ai.operation.name": "chat",
                    "gen_ai.system_instructions": json.dumps(
                        [{"type": "text", "content": "Be brief."}]
                    ),
                    "gen_ai.input.messages": json.dumps(user),
                    "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [call]}]),
                },
            ):
                pass
            with tracer.start_as_current_span(
                "execute_tool run_shell",
                attributes={
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": "run_shell",
                    "gen_ai.tool.call.id": "c1",
                    "gen_ai.tool.call.arguments": json.dumps({"command": command}),
                    "gen_ai.tool.call.result": "ok",
                },
            ):
                pass
            with tracer.start_as_current_span(
                "chat",
                attributes={
                    "gen_ai.operation.name": "chat",
                    "gen_ai.output.messages": json.dumps(
                        [{"role": "assistant", "parts": [{"type": "text", "content": "Done."}]}]
                    ),
                },
            ):
                pass
    return list(exporter.get_finished_spans())


def bench_on_end(spans: list, db: Path) -> dict:
    engine = SafetyEngine(warm_pipeline(), [DuckDBStore(db)], queue_size=len(spans) + 1)
    processor = SafetySpanProcessor(engine)
    timings = []
    for span in spans:
        start = time.perf_counter_ns()
        processor.on_end(span)
        timings.append(time.perf_counter_ns() - start)
    start = time.perf_counter()
    processor.shutdown()
    drain = time.perf_counter() - start
    timings.sort()
    return {
        "on_end_median_us": statistics.median(timings) / 1000,
        "on_end_p99_us": timings[int(len(timings) * 0.99)] / 1000,
        "drain_after_submit_s": round(drain, 3),
        "dropped": engine.stats["spans_dropped"],
    }


def warm_pipeline() -> Pipeline:
    """Detectors compile their data on first use; measure steady state, not start-up."""
    pipeline = Pipeline()
    pipeline.evaluate(make_traces(1))
    return pipeline


def bench_throughput(spans: list, db: Path | None) -> dict:
    sinks = [DuckDBStore(db)] if db else []
    engine = SafetyEngine(warm_pipeline(), sinks, background=False)
    start = time.perf_counter()
    engine.process(spans)
    engine.shutdown()
    elapsed = time.perf_counter() - start
    return {
        "spans": len(spans),
        "spans_per_s": round(len(spans) / elapsed),
        "flagged_traces": engine.stats["traces_flagged"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=int, default=2000, help="agent runs to generate")
    args = parser.parse_args()
    spans = make_traces(args.traces)
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        processor = create_processor(str(Path(tmp) / "c.duckdb"), otlp=False)
        setup = time.perf_counter() - start  # what an app's start-up pays
        processor.shutdown()
        results = {
            "create_processor_s": round(setup, 3),
            "hot_path": bench_on_end(spans, Path(tmp) / "a.duckdb"),
            "pipeline_only": bench_throughput(spans, None),
            "pipeline_and_duckdb": bench_throughput(spans, Path(tmp) / "b.duckdb"),
        }
    results["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
