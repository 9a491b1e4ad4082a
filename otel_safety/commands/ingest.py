"""`otel-safety ingest FILE...`: OTLP/JSON trace files judged into the store."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from otel_safety import detectors as detector_registry
from otel_safety.bootstrap import BYTES_PER_WORKER
from otel_safety.calibration.file import in_use
from otel_safety.commands.options import add_db, add_detectors, add_workers, detector_keys
from otel_safety.config import Settings


def add_commands(sub: argparse._SubParsersAction) -> None:
    ingest = sub.add_parser(
        "ingest",
        help="evaluate OTLP/JSON trace files into the store",
        description="Read OTLP/JSON files (one ExportTraceServiceRequest per line, as the "
        "Collector's file exporter writes them, or one JSON document; .gz accepted), run "
        "the detectors and write spans and findings to the store. OTLP/JSON logs requests "
        "in the same files (GenAI events, as instrumentations that log content write them) "
        "are read with their spans. Ingesting a file again replaces its rows instead of "
        "adding copies.",
        epilog="Bad lines are reported and skipped. Exit status: 0 when spans were read "
        "(even if some lines were bad), 1 when nothing could be read or on an error.",
    )
    ingest.add_argument(
        "files",
        nargs="+",
        metavar="FILE",
        help="OTLP/JSON file(s), or directories holding .json/.jsonl/.ndjson/.gz files "
        "(any case; other files there are named and skipped)",
    )
    add_db(ingest, "store file")
    add_detectors(ingest, "comma-separated detector keys (default: all; see `detectors`)")
    ingest.add_argument(
        "--decision-wait",
        type=float,
        help="seconds of span time a trace may stay idle before it is judged (default 30)",
    )
    add_workers(
        ingest,
        f"detection processes (default: one per core, but at most one per "
        f"{BYTES_PER_WORKER >> 20} MB of input, as starting one costs about what judging that "
        "much does, and none below two; 0 judges in this process) "
        "[OTEL_SAFETY_WORKERS]",
    )
    ingest.add_argument("--quiet", action="store_true", help="no progress, only the summary")
    ingest.set_defaults(handler=cmd_ingest)


def cmd_ingest(args: argparse.Namespace) -> int:
    from otel_safety.ingest import TRACE_FILE_SUFFIXES, ingest_files, trace_files

    settings = Settings.resolve(
        db_path=args.db,
        detectors=detector_keys(args.detectors),
        decision_wait=args.decision_wait,
        workers=args.workers,
    )
    keys = detector_registry.check(settings.detectors, settings.thresholds)  # before any file
    skipped: list[Path] = []
    files = trace_files(args.files, skipped)
    if skipped:
        names = ", ".join(str(p) for p in skipped[:3]) + (", ..." if len(skipped) > 3 else "")
        print(
            f"skipped {len(skipped):,} file(s) of the directories given whose names do not end "
            f"in {', '.join(TRACE_FILE_SUFFIXES)}: {names}",
            file=sys.stderr,
        )
    fresh = not Path(settings.db_path).exists()
    before = 0 if fresh else stored_spans(settings.db_path)
    if args.detectors and not fresh:
        _warn_of_labels_left_unjudged(settings.db_path, keys)
    summary = ingest_files(files, settings, progress=None if args.quiet else sys.stderr)
    print(summary.describe(settings.db_path))
    after = stored_spans(settings.db_path) if summary.spans else None
    if before is not None and after is not None and after - before < summary.spans:
        print(
            f"spans new to the store: {after - before:,} (the other "
            f"{summary.spans - (after - before):,} were in it already, or read twice: a span "
            "read again replaces its stored copy)"
        )
    if settings.calibration:
        print(in_use(settings.calibration, keys, settings.thresholds))
    if fresh and not summary.spans:  # nothing read: leave no empty store behind
        Path(settings.db_path).unlink(missing_ok=True)
        Path(f"{settings.db_path}.wal").unlink(missing_ok=True)
        print(f"no spans read, so {settings.db_path} was not kept")
    if summary.quarantined:
        return 1  # a loss is never silent, nor a success
    return 0 if summary.spans else 1  # an empty file too: nothing was read


def _warn_of_labels_left_unjudged(db_path: str, keys: list[str]) -> None:
    """A trace judged again keeps only the findings of the detectors that judged it now: a
    label of another detector on it then reads as a miss in `confusion_matrix` and
    `calibrate`. Said before the work, naming those detectors."""
    rows = _read_now(db_path, "SELECT DISTINCT detector FROM labels")
    labelled = {row[0] for row in rows or ()}
    others = sorted(labelled - set(keys))
    if others:
        print(
            f"{db_path} holds labels for {', '.join(others)}, which --detectors leaves out: "
            "a trace in these files judged again keeps only the findings of the detectors "
            "named, and those labels then count as misses in confusion_matrix and calibrate "
            "(ingest into another store to keep them)",
            file=sys.stderr,
        )


def stored_spans(db_path: str) -> int | None:
    """How many spans the store file holds (None when it cannot be read now: another
    process holds it, or it is not a file)."""
    rows = _read_now(db_path, "SELECT count(*) FROM spans")
    return None if rows is None else rows[0][0]


def _read_now(db_path: str, sql: str) -> list[tuple] | None:
    """The rows of `sql` over the store, or None when it cannot be read right now."""
    import duckdb

    from otel_safety.exporters.duckdb import StoreError, open_store

    try:
        with open_store(db_path, wait=0) as con:
            return con.execute(sql).fetchall()
    except (StoreError, duckdb.Error, OSError):
        return None
