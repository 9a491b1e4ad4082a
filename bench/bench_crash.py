"""Benchmark: spans acknowledged by `serve` against spans stored, when it is killed under load.

Starts `otel-safety serve` (all detectors, DuckDB store, the write-ahead spool on), has
`--clients` threads send agent traces over OTLP/HTTP in batches as fast as it acknowledges
them (each pass over a client's traces under fresh trace ids, so every span sent is a span
no earlier send stored), kills it with SIGKILL after `--seconds`, starts it again on the
same store (it judges what the spool kept), stops it with SIGTERM, and counts the
acknowledged spans missing from the store. The same run with `--spool off` is the anchor:
what the spool saves. Also prints the server's peak resident memory under that load. The
restarted serve is stopped once its spool is empty (what it has not written by a stop is
kept for the start after).

Run: python bench/bench_crash.py [--seconds 10 --clients 3]
Figures are printed, not asserted.
"""

from __future__ import annotations

import argparse
import random
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

import duckdb
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.trace import SpanContext

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _shared import forget_caller_otel_settings
from bench_pipeline import make_traces
from bench_serve import Server

BATCH = 256
# Seconds an export may take before the client counts it unacknowledged: once serve is
# killed, the exporters are shut down too, which ends their retries at once (with an SDK
# whose shutdown does not, this bounds the wait).
EXPORT_TIMEOUT = 10.0


def _ids(spans: list) -> set[tuple[str, str]]:
    return {(f"{s.context.trace_id:032x}", f"{s.context.span_id:016x}") for s in spans}


def renamed(spans: list[ReadableSpan], draw: random.Random) -> list[ReadableSpan]:
    """`spans` under fresh trace ids, one per trace, parents kept: a client that sends its
    traces again sends spans no earlier send stored (a stored copy would hide a lost one)."""
    fresh: dict[int, int] = {}

    def moved(context: SpanContext | None) -> SpanContext | None:
        if context is None:
            return None
        trace_id = fresh.setdefault(context.trace_id, draw.getrandbits(128) or 1)
        return SpanContext(
            trace_id, context.span_id, context.is_remote, context.trace_flags, context.trace_state
        )

    return [
        ReadableSpan(
            name=span.name,
            context=moved(span.context),
            parent=moved(span.parent),
            resource=span.resource,
            attributes=span.attributes,
            events=span.events,
            links=span.links,
            kind=span.kind,
            status=span.status,
            start_time=span.start_time,
            end_time=span.end_time,
            instrumentation_scope=span.instrumentation_scope,
        )
        for span in spans
    ]


def run(spool: bool, seconds: float, clients: int, traces: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="otel-safety-crash-") as tmp:
        db = str(Path(tmp) / "crash.duckdb")
        extra = [] if spool else ["--spool", "off"]
        server = Server(db, 65_536, extra_args=extra)
        acknowledged: set[tuple[str, str]] = set()
        lock = threading.Lock()
        stop = threading.Event()
        exporters = [
            HttpExporter(endpoint=f"{server.http}/v1/traces", timeout=EXPORT_TIMEOUT)
            for _ in range(clients)
        ]

        def client(exporter: HttpExporter, seed: int) -> None:
            spans, draw = make_traces(traces), random.Random(seed)
            while not stop.is_set():
                fresh = renamed(spans, draw)
                for offset in range(0, len(fresh), BATCH):
                    if stop.is_set():
                        return
                    batch = fresh[offset : offset + BATCH]
                    if exporter.export(batch) is SpanExportResult.SUCCESS:
                        with lock:
                            acknowledged.update(_ids(batch))

        threads = [
            threading.Thread(target=client, args=(exporter, random.getrandbits(64)), daemon=True)
            for exporter in exporters
        ]
        try:
            for thread in threads:
                thread.start()
            time.sleep(seconds)
            peak = server.peak_rss_mib()
            server.process.send_signal(signal.SIGKILL)
            server.process.wait(30)
        finally:
            if server.process.poll() is None:
                server.process.kill()
                server.process.wait(30)
            stop.set()
            for exporter in exporters:  # ends a retry against the dead server at once
                exporter.shutdown()
            for thread in threads:
                thread.join(EXPORT_TIMEOUT + 5)
        with lock:
            owed = set(acknowledged)
        again = Server(db, 65_536, extra_args=extra)
        try:
            deadline = time.monotonic() + 600
            while spool and again.health().get("spool_records") and time.monotonic() < deadline:
                time.sleep(0.5)  # the restarted serve judges what the spool kept
        finally:
            again.stop()
        with duckdb.connect(db, read_only=True) as con:
            stored = set(con.execute("SELECT trace_id, span_id FROM spans").fetchall())
    missing = owed - stored
    return {
        "acknowledged": len(owed),
        "stored": len(owed & stored),
        "missing": len(missing),
        "peak_rss_mib": peak,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="load before the kill")
    parser.add_argument("--clients", type=int, default=3, help="concurrent OTLP/HTTP clients")
    parser.add_argument("--traces", type=int, default=2000, help="agent traces per client")
    args = parser.parse_args()
    forget_caller_otel_settings()  # before the clients build their exporters
    rows = [
        ("spool on (default)", run(True, args.seconds, args.clients, args.traces)),
        ("--spool off (anchor)", run(False, args.seconds, args.clients, args.traces)),
    ]
    print(
        f"serve killed with SIGKILL after {args.seconds:g} s of {args.clients} OTLP/HTTP "
        f"clients (batches of {BATCH}), restarted on the same store, stopped with SIGTERM"
    )
    print()
    print("| serve | spans acknowledged | stored after restart | missing | peak RSS MiB |")
    print("|---|---:|---:|---:|---:|")
    for name, r in rows:
        print(
            f"| {name} | {r['acknowledged']} | {r['stored']} | {r['missing']} | "
            f"{r['peak_rss_mib']:.0f} |"
        )


if __name__ == "__main__":
    main()
