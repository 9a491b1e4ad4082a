"""Benchmark: what one `GET /metrics` scrape of `serve` costs, rendered by the Prometheus
reader of the `prometheus` extra from otel-safety's own OpenTelemetry meter.

A real Sidecar (in-memory store, receivers on 127.0.0.1) with every counter touched is
scraped `--scrapes` times over HTTP; the figure is the mean time per scrape and the size of
the page.

Run: python bench/bench_metrics.py [--scrapes 200]
Figures are printed, not asserted; they depend on the machine.
"""

from __future__ import annotations

import argparse
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _shared import at_least_one, description

from otel_safety.config import Settings
from otel_safety.sidecar.metrics import HELP
from otel_safety.sidecar.server import Sidecar, SidecarOptions


def main() -> None:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("--scrapes", type=at_least_one, default=200)
    args = parser.parse_args()
    settings = Settings.resolve(environ={}, db_path=":memory:", detection="thread")
    with Sidecar(settings, SidecarOptions(grpc_port=None, http_port=0)) as sidecar:
        for name in HELP:
            sidecar.metrics.add(name, 3, outcome="ok")
        url = f"{sidecar.http_url}/metrics"
        page = urllib.request.urlopen(url, timeout=10).read()
        start = time.perf_counter()
        for _ in range(args.scrapes):
            urllib.request.urlopen(url, timeout=10).read()
        took = (time.perf_counter() - start) / args.scrapes
    series = [line for line in page.decode().splitlines() if not line.startswith("#")]
    print(f"GET /metrics: {took * 1000:.2f} ms per scrape, {len(series)} series, {len(page)} bytes")


if __name__ == "__main__":
    main()
