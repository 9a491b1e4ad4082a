"""Benchmark: `otel-safety serve` throughput per process and its peak memory.

Starts `otel-safety serve` as a child process (all detectors, DuckDB store), sends realistic
agent traces with the real OTLP exporters (gRPC, then HTTP/protobuf) in batches of 512
spans, and times until the server has judged and handed every span to its sinks. Spans per
second are per server process; the client runs in this process, on the same machine.
Peak memory is the server's peak resident set (VmHWM).

Run: make bench-serve   (or: python bench/bench_serve.py --traces 5000)
Figures are printed, not asserted; they depend on the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.sdk.trace.export import SpanExportResult

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _shared import child_environment, forget_caller_otel_settings
from bench_pipeline import make_traces  # the same traces as the pipeline bench

BATCH = 512
HOST = "127.0.0.1"  # this machine only, whatever OTEL_SAFETY_SERVE_HOST says


def serve_command(
    db: str, queue_size: int, store: bool = True, extra_args: list[str] | None = None
) -> list[str]:
    """`otel-safety serve` as the benches start it: on loopback, on free ports."""
    command = [
        sys.executable, "-m", "otel_safety.cli", "serve", "--host", HOST,
        "--grpc-port", "0", "--http-port", "0", "--db", db,
        "--queue-size", str(queue_size), "--log-level", "ERROR",
    ]  # fmt: skip
    if not store:
        command.append("--no-store")
    return command + (extra_args or [])


class Server:
    """`otel-safety serve` in a child process that inherits none of the caller's OTEL_*
    settings (but the pattern cache): the bench's own arguments are all it is told."""

    def __init__(
        self, db: str, queue_size: int, store: bool = True, extra_args: list[str] | None = None
    ) -> None:
        self.process = subprocess.Popen(
            serve_command(db, queue_size, store, extra_args),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=child_environment(),
        )
        self.lines: list[str] = []
        ready = threading.Event()

        def read() -> None:
            assert self.process.stdout is not None
            for line in self.process.stdout:
                self.lines.append(line)
                if "ready" in line and line.startswith("otel-safety serve: ready"):
                    ready.set()

        threading.Thread(target=read, daemon=True).start()
        if not ready.wait(120):
            self.process.kill()
            raise SystemExit("serve did not start:\n" + "".join(self.lines))
        text = "".join(self.lines)
        self.grpc = re.search(r"OTLP/gRPC on (\S+)", text).group(1)
        self.http = re.search(r"OTLP/HTTP on (http\S+)/v1/traces", text).group(1)

    def health(self) -> dict:
        with urllib.request.urlopen(f"{self.http}/health", timeout=10) as reply:
            return json.load(reply)

    def peak_rss_mib(self) -> float:
        status = Path(f"/proc/{self.process.pid}/status").read_text()
        return int(re.search(r"VmHWM:\s+(\d+) kB", status).group(1)) / 1024

    def rss_mib(self) -> float:
        status = Path(f"/proc/{self.process.pid}/status").read_text()
        return int(re.search(r"VmRSS:\s+(\d+) kB", status).group(1)) / 1024

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(120)


def run(transport: str, spans: list, queue_size: int, store: bool = True) -> dict:
    with tempfile.TemporaryDirectory(prefix="otel-safety-bench-") as tmp:
        server = Server(str(Path(tmp) / "bench.duckdb"), queue_size, store)
        try:
            idle_rss = server.rss_mib()
            if transport == "grpc":
                exporter = GrpcExporter(endpoint=f"http://{server.grpc}", insecure=True, timeout=60)
            else:
                exporter = HttpExporter(endpoint=f"{server.http}/v1/traces", timeout=60)
            started = time.perf_counter()
            failed = 0
            for offset in range(0, len(spans), BATCH):
                if exporter.export(spans[offset : offset + BATCH]) is not SpanExportResult.SUCCESS:
                    failed += 1
            sent = time.perf_counter()
            while (
                server.health()["spans_evaluated"] < len(spans) and time.perf_counter() - sent < 300
            ):
                time.sleep(0.05)
            done = time.perf_counter()
            health = server.health()
            peak = server.peak_rss_mib()
            exporter.shutdown()
        finally:
            server.stop()
    return {
        "transport": transport,
        "spans": len(spans),
        "evaluated": health["spans_evaluated"],
        "rejected_batches": failed,
        "seconds": done - started,
        "spans_per_second": health["spans_evaluated"] / (done - started),
        "send_seconds": sent - started,
        "idle_rss_mib": idle_rss,
        "peak_rss_mib": peak,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=int, default=5000, help="agent traces (4 spans each)")
    parser.add_argument("--queue-size", type=int, default=65536, help="serve's --queue-size")
    parser.add_argument(
        "--no-store", action="store_true", help="serve --no-store: receiver and detectors only"
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args()
    forget_caller_otel_settings()  # before the clients build their exporters
    spans = make_traces(args.traces)
    store = not args.no_store
    results = [run(transport, spans, args.queue_size, store) for transport in ("grpc", "http")]
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(
        f"otel-safety serve, {len(spans)} spans ({args.traces} agent traces), batches of "
        f"{BATCH}, all detectors, {'DuckDB store' if store else 'no store'}, "
        f"{os.cpu_count()} CPUs"
    )
    print()
    print("| client exporter | spans judged | seconds | spans/s | server RSS MiB idle | peak |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in results:
        print(
            f"| OTLP {r['transport']} | {r['evaluated']} | {r['seconds']:.1f} | "
            f"{r['spans_per_second']:.0f} | {r['idle_rss_mib']:.0f} | {r['peak_rss_mib']:.0f} |"
        )


if __name__ == "__main__":
    main()
