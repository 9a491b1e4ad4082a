"""Offline ingest: OTLP/JSON files through the same engine and pipeline as live traffic.

Decision waits are measured in span time (the latest end time seen), not wall time, so a
file gives the same result however fast it is read.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from otel_safety.bootstrap import build_engine
from otel_safety.config import Settings
from otel_safety.exporters.duckdb import DuckDBStore
from otel_safety.otlp import read_otlp_json

PROGRESS_INTERVAL = 1.0


@dataclass
class IngestSummary:
    files: int = 0
    lines: int = 0
    spans: int = 0
    bad_lines: list[str] = field(default_factory=list)
    stats: dict[str, int] = field(default_factory=dict)

    def describe(self, db_path: str) -> str:
        lines = [
            f"ingested {self.spans} spans from {self.lines} lines in {self.files} file(s) "
            f"into {db_path}",
            f"traces evaluated: {self.stats.get('traces_evaluated', 0)}, "
            f"flagged: {self.stats.get('traces_flagged', 0)}, "
            f"findings: {self.stats.get('findings', 0)}, "
            f"spans with reading problems: {self.stats.get('spans_with_notes', 0)}",
        ]
        if self.bad_lines:
            lines.append(f"{len(self.bad_lines)} bad line(s) skipped:")
            lines.extend(f"  {problem}" for problem in self.bad_lines[:20])
            if len(self.bad_lines) > 20:
                lines.append(f"  … and {len(self.bad_lines) - 20} more")
        return "\n".join(lines)


def ingest_files(
    paths: Sequence[str | Path], settings: Settings, progress: TextIO | None = None
) -> IngestSummary:
    engine = build_engine(settings, [DuckDBStore(settings.db_path)], background=False)
    summary = IngestSummary()
    span_clock = 0.0
    try:
        for path in paths:
            summary.files += 1
            total = max(1, Path(path).stat().st_size)
            meter = _Progress(progress, str(path), total)
            for batch in read_otlp_json(path):
                summary.lines += 1
                if batch.error:
                    summary.bad_lines.append(
                        batch.error if str(path) in batch.error else f"{path}: {batch.error}"
                    )
                if batch.spans:
                    summary.spans += len(batch.spans)
                    span_clock = max(span_clock, *((s.end_time or 0) / 1e9 for s in batch.spans))
                    engine.process(batch.spans, now=span_clock)
                meter.update(batch.size, summary, engine.stats)
            meter.done(summary, engine.stats)
    finally:
        engine.shutdown()
    summary.stats = dict(engine.stats)
    return summary


class _Progress:
    """One status line per second on a terminal; nothing when not asked for."""

    def __init__(self, stream: TextIO | None, name: str, total: int) -> None:
        self.stream = stream
        self.name = name
        self.total = total
        self.last = 0.0
        self.tty = bool(stream and stream.isatty())

    def update(self, consumed: int, summary: IngestSummary, stats: dict[str, int]) -> None:
        now = time.monotonic()
        if self.stream is None or now - self.last < PROGRESS_INTERVAL:
            return
        self.last = now
        self._write(consumed, summary, stats, final=False)

    def done(self, summary: IngestSummary, stats: dict[str, int]) -> None:
        if self.stream is not None and self.last:
            self._write(self.total, summary, stats, final=True)

    def _write(
        self, consumed: int, summary: IngestSummary, stats: dict[str, int], final: bool
    ) -> None:
        if self.stream is None:
            return
        percent = min(100.0, 100.0 * consumed / self.total)
        line = (
            f"{self.name}: {percent:5.1f}%  {summary.spans} spans, "
            f"{stats.get('traces_evaluated', 0)} traces judged, {len(summary.bad_lines)} bad lines"
        )
        if self.tty:
            self.stream.write("\r" + line + ("\n" if final else ""))
        else:
            self.stream.write(line + "\n")
        self.stream.flush()
