"""Benchmark: `serve`'s memory under sustained overload.

Starts `otel-safety serve` (all detectors, DuckDB store, spool on) and has `--clients` threads
send large agent traces (each message `--message-kib` KiB) over OTLP/HTTP as fast as it
takes them, for `--seconds`; every `--every` seconds prints the server's resident memory
beside its idle figure (the anchor, measured in the same run), the bytes waiting for the
pipeline and held in the trace buffer, and the spans judged and refused so far. Memory that
stays flat while refusals grow is the byte budget at work.

Run: python bench/bench_overload.py [--seconds 150 --clients 3]
Figures are printed, not asserted.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _shared import forget_caller_otel_settings
from bench_serve import Server

BATCH = 64


def big_traces(count: int, message_kib: int) -> list:
    """Agent runs whose messages are long (a pasted document), roots included."""
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("overload")
    sentence = "The quarterly report says revenue grew in every region. "
    body = (sentence * (message_kib * 1024 // len(sentence) + 1))[: message_kib * 1024]
    for number in range(count):
        messages = [{"role": "user", "parts": [{"type": "text", "content": f"{number} {body}"}]}]
        with (
            tracer.start_as_current_span(
                "invoke_agent", attributes={"gen_ai.operation.name": "invoke_agent"}
            ),
            tracer.start_as_current_span(
                "chat",
                attributes={
                    "gen_ai.operation.name": "chat",
                    "gen_ai.input.messages": json.dumps(messages),
                },
            ),
        ):
            pass
    provider.shutdown()
    return list(memory.get_finished_spans())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=150.0)
    parser.add_argument("--clients", type=int, default=3)
    parser.add_argument("--every", type=float, default=15.0)
    parser.add_argument("--message-kib", type=int, default=32)
    args = parser.parse_args()
    forget_caller_otel_settings()  # before the clients build their exporters
    with tempfile.TemporaryDirectory(prefix="otel-safety-overload-") as tmp:
        server = Server(str(Path(tmp) / "overload.duckdb"), 65_536)
        idle = server.rss_mib()
        stop = threading.Event()
        refused = [0]

        def client() -> None:
            exporter = HttpExporter(endpoint=f"{server.http}/v1/traces", timeout=5)
            spans = big_traces(200, args.message_kib)
            offset = 0
            while not stop.is_set():
                batch = spans[offset : offset + BATCH]
                offset = (offset + BATCH) % len(spans)
                if batch and exporter.export(batch).name != "SUCCESS":
                    refused[0] += 1
            exporter.shutdown()

        threads = [threading.Thread(target=client, daemon=True) for _ in range(args.clients)]
        for thread in threads:
            thread.start()
        started = time.monotonic()
        print(
            f"serve under {args.clients} OTLP/HTTP clients sending {args.message_kib} KiB "
            f"messages in batches of {BATCH}; idle RSS {idle:.0f} MiB (the anchor)"
        )
        print()
        print(
            "| seconds | RSS MiB | RSS / idle | queue bytes | buffered bytes | spans judged | "
            "spans refused |"
        )
        print("|---:|---:|---:|---:|---:|---:|---:|")
        while time.monotonic() - started < args.seconds:
            time.sleep(args.every)
            health = server.health()
            rss = server.rss_mib()
            print(
                f"| {time.monotonic() - started:.0f} | {rss:.0f} | {rss / idle:.2f} | "
                f"{health.get('queue_waiting_bytes', 0)} | {health.get('buffered_bytes', 0)} | "
                f"{health['spans_evaluated']} | {health.get('spans_rejected', 0)} |",
                flush=True,
            )
        stop.set()
        for thread in threads:
            thread.join(30)
        server.stop()


if __name__ == "__main__":
    main()
