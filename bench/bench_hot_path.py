"""Benchmark: what otel-safety's span processor costs the application's thread per span.

The SDK calls a processor's `on_start` and `on_end` on the thread that makes the span.
BatchSpanProcessor appends to a deque there; otel-safety must do no more than that, plus
noting an agent run's start. The spans are those of `bench_app_overhead`'s agent runs
(an agent span, a ~2 KB chat span, a tool span). Each processor's calls are timed over
all spans, best of `--repeat`, `on_end` given the span's read-only copy as the SDK gives
it; the engine has no worker thread here, so only the calls themselves are timed. Its queue
holds every span; in one row detection is behind (more than a batch queued), so each span
is parked as it is queued (otel_safety/parking.py); in another it holds one, so every
other span takes the path of a span dropped, the path of an app making spans faster than
detection takes them for long.

Also timed: reading the starting attributes of a span to tell an agent run, through the
SDK's public mapping and through the dict it keeps (`mapping.attributes.span_attributes`).

Run: make bench   (or: python bench/bench_hot_path.py)
Figures are printed, not asserted; they depend on the machine.
"""

from __future__ import annotations

import argparse
import json
import timeit
from collections.abc import Callable
from typing import Any

from bench_app_overhead import _Dropping, agent_run  # a sibling: bench/ is the script's path
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from otel_safety.engine import SafetyEngine
from otel_safety.mapping import is_agent_run
from otel_safety.mapping.attributes import span_attributes
from otel_safety.pipeline import Pipeline
from otel_safety.processor import SafetySpanProcessor


class _Collect(SpanProcessor):
    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.ended: dict[int, ReadableSpan] = {}

    def on_start(self, span, parent_context=None) -> None:
        self.spans.append(span)

    def on_end(self, span: ReadableSpan) -> None:
        self.ended[span.context.span_id] = span


def agent_spans(runs: int) -> list[tuple[Span, ReadableSpan]]:
    """Each span as `on_start` gets it, with the read-only copy `on_end` gets."""
    collect = _Collect()
    provider = TracerProvider()
    provider.add_span_processor(collect)
    tracer = provider.get_tracer("bench")
    for number in range(runs):
        agent_run(tracer, number)
    return [(span, collect.ended[span.context.span_id]) for span in collect.spans]


def per_span_us(spans: list, call: Callable[[Any], object], repeat: int) -> float:
    def run() -> None:
        for span in spans:
            call(span)

    return min(timeit.repeat(run, number=1, repeat=repeat)) / len(spans) * 1e6


def both_calls(processor: SpanProcessor) -> Callable[[tuple[Span, ReadableSpan]], None]:
    def call(pair: tuple[Span, ReadableSpan]) -> None:
        processor.on_start(pair[0], None)
        processor.on_end(pair[1])

    return call


def engine(queue_size: int, batch_size: int = 512) -> SafetyEngine:
    return SafetyEngine(
        Pipeline(detectors=[]), [], background=False, queue_size=queue_size, batch_size=batch_size
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2000, help="agent runs (3 spans each)")
    parser.add_argument("--repeat", type=int, default=7, help="timings; the best is kept")
    parser.add_argument("--format", choices=("json", "markdown"), default="json")
    args = parser.parse_args()
    spans = agent_spans(args.runs)
    room = 2 * len(spans) * (args.repeat + 1)
    anchor = BatchSpanProcessor(_Dropping(), max_queue_size=room)
    processor = SafetySpanProcessor(engine(room, batch_size=room))  # never a batch behind
    behind = SafetySpanProcessor(engine(room, batch_size=1))
    full = SafetySpanProcessor(engine(1))
    anchor_us = per_span_us(spans, both_calls(anchor), args.repeat)
    ours_us = per_span_us(spans, both_calls(processor), args.repeat)
    behind_us = per_span_us(spans, both_calls(behind), args.repeat)
    full_us = per_span_us(spans, both_calls(full), args.repeat)
    started = [span for span, _ in spans]
    public_us = per_span_us(started, lambda s: is_agent_run(s.attributes), args.repeat)
    raw_us = per_span_us(started, lambda s: is_agent_run(span_attributes(s)), args.repeat)
    anchor.shutdown()
    rows = [
        {"call": "BatchSpanProcessor on_start + on_end (anchor)", "us_per_span": anchor_us},
        {"call": "otel-safety on_start + on_end", "us_per_span": ours_us},
        {"call": "otel-safety, detection behind (each span parked)", "us_per_span": behind_us},
        {"call": "otel-safety, the queue full (every span dropped)", "us_per_span": full_us},
        {"call": "is an agent run? public attribute mapping", "us_per_span": public_us},
        {"call": "is an agent run? the SDK's dict", "us_per_span": raw_us},
    ]
    for row in rows:
        row["vs_anchor"] = round(row["us_per_span"] / anchor_us, 2)
        row["us_per_span"] = round(row["us_per_span"], 3)
    if args.format == "json":
        print(json.dumps({"spans": len(spans), "rows": rows}, indent=2))
        return
    print(f"{len(spans):,} spans of agent runs; best of {args.repeat}.\n")
    print("| call on the app's thread | per span | vs anchor |\n|---|---|---|")
    for row in rows:
        print(f"| {row['call']} | {row['us_per_span']} us | {row['vs_anchor']}x |")


if __name__ == "__main__":
    main()
