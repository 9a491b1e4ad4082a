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

from opentelemetry.sdk.trace import ReadableSpan

from otel_safety.bootstrap import build_engine, detectors_ready, stream_workers
from otel_safety.buffer import roots_last
from otel_safety.config import Settings
from otel_safety.exporters.duckdb import DuckDBStore
from otel_safety.logs import LogEvent
from otel_safety.otlp import holds_logs, read_otlp_json

PROGRESS_INTERVAL = 1.0
# Spans handed to the engine at once: the traces they complete are judged as one batch,
# split over the detection processes, so the batch must hold enough traces for each.
CHUNK_SPANS = 2_000


@dataclass
class IngestSummary:
    files: int = 0
    lines: int = 0
    spans: int = 0
    bad_lines: list[str] = field(default_factory=list)
    stats: dict[str, int] = field(default_factory=dict)
    quarantined: int = 0  # traces the store refused even one by one (logged with the reason)
    empty_files: list[str] = field(default_factory=list)  # nothing in them to read
    log_events: int = 0  # GenAI events read from OTLP logs requests
    unmatched_events: int = 0  # of those, events whose span was not in the input

    def describe(self, db_path: str) -> str:
        stats = self.stats
        read = f"from {_count(self.lines, 'line')} in {_count(self.files, 'file')}"
        lines = [
            f"ingested {_count(self.spans, 'span')} {read} into {db_path}"
            if self.spans
            else f"read no spans {read}: nothing written to {db_path}",
            *self._empty(),
            f"agent runs judged: {stats.get('agent_traces', 0)}, "
            f"flagged: {stats.get('traces_flagged', 0)}, "
            f"findings fired: {stats.get('findings_fired', 0)} "
            f"(of {stats.get('findings', 0)} detector verdicts); "
            f"other traces passed through: "
            f"{stats.get('traces_evaluated', 0) - stats.get('agent_traces', 0)}",
        ]
        if self.log_events:
            lines.append(
                f"GenAI log events read with their spans: {self.log_events - self.unmatched_events}"
                f" of {self.log_events}"
                + (
                    " (the rest name spans the input does not hold)"
                    if self.unmatched_events
                    else ""
                )
            )
        if stats.get("spans_with_notes"):
            lines.append(
                f"spans with reading problems: {stats['spans_with_notes']} (see spans.notes)"
            )
        if self.quarantined:
            lines.append(f"traces the store refused: {self.quarantined} (not written; see the log)")
        if stats.get("detector_errors"):
            lines.append(f"detector errors: {stats['detector_errors']} (see the log)")
        if stats.get("deep_candidates"):
            lines.append(deep_line(stats))
        if self.bad_lines:
            lines.append(
                f"{_count(len(self.bad_lines), 'line')} with problems "
                "(what was readable in them was kept):"
            )
            lines.extend(f"  {problem}" for problem in self.bad_lines[:20])
            if len(self.bad_lines) > 20:
                lines.append(f"  … and {len(self.bad_lines) - 20} more")
        return "\n".join(lines)

    def _empty(self) -> list[str]:
        """Name the empty files: "0 spans from 0 lines" alone does not say why."""
        if not self.empty_files:
            return []
        if len(self.empty_files) == 1:
            return [f"{self.empty_files[0]} is empty: nothing in it to read"]
        return [f"empty, nothing in them to read: {', '.join(self.empty_files)}"]


class _HeldEvents:
    """GenAI log events by trace, handed to the engine just before their trace's spans: a
    trace is judged when its root ends, so its events must be in the buffer by then, and
    the Collector writes logs to files of their own, read first (`otlp.holds_logs`)."""

    def __init__(self) -> None:
        self._by_trace: dict[int, list[LogEvent]] = {}

    def add(self, events: Sequence[LogEvent]) -> None:
        for event in events:
            self._by_trace.setdefault(event.trace_id, []).append(event)

    def with_spans(self, spans: list[ReadableSpan]) -> list[ReadableSpan | LogEvent]:
        if not self._by_trace:
            return list(spans)
        events: list[ReadableSpan | LogEvent] = []
        for trace_id in dict.fromkeys(span.context.trace_id for span in spans):
            events.extend(self._by_trace.pop(trace_id, ()))
        return [*events, *spans]

    def count(self) -> int:
        return sum(len(events) for events in self._by_trace.values())


TRACE_FILE_SUFFIXES = (".json", ".jsonl", ".ndjson", ".gz")


def trace_files(paths: Sequence[str | Path], skipped: list[Path] | None = None) -> list[Path]:
    """Files as given; directories expand to the trace files inside them (by suffix, in any
    case: `TRACE.JSON` too), sorted. The other files of a directory go to `skipped`, for the
    command to say: a folder's `.txt` notes, or traces under a suffix we do not read."""
    files: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            inside = sorted(p for p in path.rglob("*") if p.is_file())
            found = [p for p in inside if p.name.lower().endswith(TRACE_FILE_SUFFIXES)]
            if not found:
                raise ValueError(
                    f"{path} is a directory with no {'/'.join(TRACE_FILE_SUFFIXES)} files in it"
                )
            files.extend(found)
            if skipped is not None:
                taken = set(found)
                skipped.extend(p for p in inside if p not in taken)
        elif path.is_file():
            files.append(path)
        else:
            raise ValueError(f"no such file: {path}")
    return files


# How much larger than the file a gzipped OTLP/JSON file's text is, about.
GZIP_RATIO = 8


def _json_bytes(path: str | Path) -> int:
    """About how many bytes of OTLP/JSON a trace file holds."""
    size = Path(path).stat().st_size
    return size * GZIP_RATIO if str(path).endswith(".gz") else size


def ingest_files(
    paths: Sequence[str | Path], settings: Settings, progress: TextIO | None = None
) -> IngestSummary:
    workers = stream_workers(settings, input_bytes=sum(_json_bytes(p) for p in paths))
    if progress is not None:  # the detectors take a few seconds to load: say so first
        plural = "" if workers == 1 else "es"
        where = "in this process" if workers == 0 else f"in {workers} detection process{plural}"
        progress.write(f"loading the detectors {where} ...\n")
        progress.flush()
    engine = build_engine(  # the next lines are read while the detectors judge the last
        settings,
        [],
        background=False,
        detection="process",
        workers=workers,
        overlap=True,
    )
    try:
        detectors_ready(engine)  # detectors first: a data error leaves no empty store
    except ValueError:
        engine.shutdown()
        raise
    store = DuckDBStore(settings.db_path, hold=True)
    engine.sinks.append(store)
    summary = IngestSummary()
    span_clock = 0.0
    pending: list[ReadableSpan] = []
    held = _HeldEvents()
    try:
        for path in sorted(paths, key=lambda p: not holds_logs(p)):  # logs first
            summary.files += 1
            total = max(1, Path(path).stat().st_size)
            meter = _Progress(progress, str(path), total)
            lines_before = summary.lines
            for batch in read_otlp_json(path):
                summary.lines += 1
                if batch.error:
                    summary.bad_lines.append(
                        batch.error if str(path) in batch.error else f"{path}: {batch.error}"
                    )
                if batch.events:
                    summary.log_events += len(batch.events)
                    held.add(batch.events)
                if batch.spans:
                    summary.spans += len(batch.spans)
                    span_clock = max(span_clock, *((s.end_time or 0) / 1e9 for s in batch.spans))
                    pending.extend(batch.spans)
                if len(pending) >= CHUNK_SPANS:
                    engine.process(held.with_spans(roots_last(pending)), now=span_clock)
                    pending = []
                meter.update(batch.size, summary, engine.stats)
            engine.process(held.with_spans(roots_last(pending)), now=span_clock)
            pending = []
            meter.done(summary, engine.stats)
            if summary.lines == lines_before:
                summary.empty_files.append(str(path))
        summary.unmatched_events = held.count()  # no span of theirs in the input
        if engine.deep is not None:  # every queued analysis is part of this ingest
            engine.drain()
            engine.deep.wait(progress)
    finally:
        engine.shutdown()
    summary.stats = dict(engine.stats)
    summary.quarantined = store.rejected
    return summary


def deep_line(stats: dict[str, int]) -> str:
    """What the deep analysis did, in one line (ingest's summary, `status`)."""
    skipped = (
        stats.get("deep_sampled_out", 0)
        + stats.get("deep_over_budget", 0)
        + stats.get("deep_over_token_budget", 0)
    )
    return (
        f"deep analysis: {stats.get('deep_candidates', 0)} candidates, "
        f"{stats.get('deep_analysed', 0)} analysed, {stats.get('deep_raised', 0)} raised, "
        f"{stats.get('deep_errors', 0)} errors, {stats.get('deep_dropped', 0)} dropped "
        f"(queue full), {skipped} skipped (sampling, budgets); "
        f"{stats.get('deep_calls', 0)} calls, {stats.get('deep_tokens', 0)} tokens"
    )


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


class _Progress:
    """One status line per second on a terminal; nothing when not asked for."""

    def __init__(self, stream: TextIO | None, name: str, total: int) -> None:
        self.stream = stream
        self.name = name
        self.total = total
        self.last = time.monotonic()  # the first line comes after one interval
        self.printed = False
        self.tty = bool(stream and stream.isatty())

    def update(self, consumed: int, summary: IngestSummary, stats: dict[str, int]) -> None:
        now = time.monotonic()
        if self.stream is None or now - self.last < PROGRESS_INTERVAL:
            return
        self.last = now
        self._write(consumed, summary, stats, final=False)

    def done(self, summary: IngestSummary, stats: dict[str, int]) -> None:
        if self.printed:
            self._write(self.total, summary, stats, final=True)

    def _write(
        self, consumed: int, summary: IngestSummary, stats: dict[str, int], final: bool
    ) -> None:
        if self.stream is None:
            return
        self.printed = True
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
