"""Benchmark: `serve`'s peak memory while decoding bodies that weigh far more decoded.

A one-span OTLP/JSON request carrying `--attributes` tiny attributes (16 MiB at the default
400,000) becomes some 25 times its size as Python objects. `--clients` such requests are sent
at once over OTLP/HTTP; the table prints each answer's status, the wall time, and the
server's peak resident memory against its idle figure measured in the same run (the anchor).
Bodies are decoded a few at a time (`SidecarOptions.decoders`), so the peak follows the
decoders, not the clients; the rest are answered with a retryable 429.

Run: python bench/bench_decode_memory.py [--clients 8 --attributes 400000]
Figures are printed, not asserted.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_serve import Server


def attribute_heavy_body(attributes: int) -> bytes:
    """One span whose attributes are `attributes` integers: small bytes, many objects."""
    span = {
        "traceId": "5b8efff798038103d269b633813fc60c",
        "spanId": "eee19b7ec3c1b174",
        "name": "heavy",
        "startTimeUnixNano": "1700000000000000000",
        "endTimeUnixNano": "1700000001000000000",
        "attributes": [{"key": f"k{n}", "value": {"intValue": "1"}} for n in range(attributes)],
    }
    request = {"resourceSpans": [{"scopeSpans": [{"scope": {"name": "bench"}, "spans": [span]}]}]}
    return json.dumps(request).encode()


def post(url: str, body: bytes) -> str:
    request = urllib.request.Request(
        url, data=body, headers={"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=600) as reply:
            return str(reply.status)
    except urllib.error.HTTPError as exc:
        return str(exc.code)
    except OSError as exc:
        return type(exc).__name__


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--attributes", type=int, default=400_000)
    args = parser.parse_args()
    body = attribute_heavy_body(args.attributes)
    with tempfile.TemporaryDirectory(prefix="otel-safety-decode-") as tmp:
        server = Server(str(Path(tmp) / "decode.duckdb"), 65_536, extra_args=["--workers", "1"])
        try:
            idle = server.rss_mib()
            answers: list[str] = []
            senders = [
                threading.Thread(
                    target=lambda: answers.append(post(f"{server.http}/v1/traces", body))
                )
                for _ in range(args.clients)
            ]
            started = time.monotonic()
            for sender in senders:
                sender.start()
            for sender in senders:
                sender.join()
            took = time.monotonic() - started
            peak = server.peak_rss_mib()
        finally:
            server.stop()
    statuses = ", ".join(
        f"{count} x {status}" for status, count in sorted(Counter(answers).items())
    )
    print(
        f"{args.clients} OTLP/HTTP clients at once, each one span of {args.attributes:,} "
        f"attributes ({len(body) / 2**20:.1f} MiB of JSON)"
    )
    print()
    print("| answers | seconds | idle RSS MiB (anchor) | peak RSS MiB | peak / idle |")
    print("|---|---:|---:|---:|---:|")
    print(f"| {statuses} | {took:.1f} | {idle:.0f} | {peak:.0f} | {peak / idle:.1f} |")


if __name__ == "__main__":
    main()
