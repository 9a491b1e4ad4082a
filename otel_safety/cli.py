"""`otel-safety` command line: demo, ingest, query, detectors."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import duckdb

from otel_safety import __version__, queries
from otel_safety import detectors as detector_registry
from otel_safety.config import ConfigError, Settings

DEFAULT_DB = "otel-safety.duckdb"
DEMO_DB = "otel-safety-demo.duckdb"


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return 2
    try:
        return args.handler(args)
    except BrokenPipeError:  # output piped into `head` and the like
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (ConfigError, queries.QueryError, ValueError, OSError, duckdb.Error) as exc:
        print(f"otel-safety {args.command}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="otel-safety",
        description="Agent-safety detectors over OpenTelemetry GenAI spans, stored in DuckDB.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    demo = sub.add_parser(
        "demo",
        help="run scripted agents through otel-safety and show what was flagged",
        description="Run scripted pydantic-ai agents with real local tools through the "
        "drop-in setup, then print the flagged spans from the DuckDB store.",
    )
    demo.add_argument("--db", default=DEMO_DB, help=f"store file to create (default {DEMO_DB})")
    demo.set_defaults(handler=cmd_demo)

    ingest = sub.add_parser(
        "ingest",
        help="evaluate OTLP/JSON trace files into the store",
        description="Read OTLP/JSON files (one ExportTraceServiceRequest per line, as the "
        "Collector's file exporter writes them, or one JSON document; .gz accepted), run "
        "the detectors and write spans and findings to the store.",
    )
    ingest.add_argument("files", nargs="+", metavar="FILE", help="OTLP/JSON file(s)")
    ingest.add_argument("--db", default=DEFAULT_DB, help=f"store file (default {DEFAULT_DB})")
    ingest.add_argument(
        "--detectors", help="comma-separated detector keys (default: all; see `detectors`)"
    )
    ingest.add_argument(
        "--decision-wait",
        type=float,
        help="seconds of span time a trace may stay idle before it is judged (default 30)",
    )
    ingest.add_argument("--quiet", action="store_true", help="no progress, only the summary")
    ingest.set_defaults(handler=cmd_ingest)

    query = sub.add_parser(
        "query",
        help="run a named query from queries/ or ad-hoc SQL",
        description="Run a query over the store. NAME is a file of queries/ without .sql "
        "(see --list), a path to a .sql file, or SQL text.",
    )
    query.add_argument("sql", nargs="?", metavar="NAME|SQL")
    query.add_argument("--db", default=DEFAULT_DB, help=f"store file (default {DEFAULT_DB})")
    query.add_argument("--format", choices=("table", "csv", "json"), default="table")
    query.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="set a query parameter (a DuckDB variable); repeatable",
    )
    query.add_argument("--list", action="store_true", help="list the named queries")
    query.set_defaults(handler=cmd_query)

    listing = sub.add_parser("detectors", help="list the registered detectors")
    listing.set_defaults(handler=cmd_detectors)
    return parser


def cmd_demo(args: argparse.Namespace) -> int:
    try:
        from otel_safety.demo import run_demo
    except ImportError as exc:
        print(f"otel-safety demo needs pydantic-ai: pip install 'otel-safety[demo]' ({exc})")
        return 1
    path = Path(args.db)
    if path.exists():
        _remove_old_store(path)
    run_demo(str(path))
    return 0


def cmd_ingest(args: argparse.Namespace) -> int:
    from otel_safety.ingest import ingest_files

    missing = [f for f in args.files if not Path(f).is_file()]
    if missing:
        raise ValueError(f"no such file: {', '.join(missing)}")
    settings = Settings.resolve(
        db_path=args.db,
        detectors=args.detectors.split(",") if args.detectors else None,
        decision_wait=args.decision_wait,
    )
    summary = ingest_files(args.files, settings, progress=None if args.quiet else sys.stderr)
    print(summary.describe(settings.db_path))
    return 0 if summary.spans or not summary.bad_lines else 1


def cmd_query(args: argparse.Namespace) -> int:
    if args.list or not args.sql:
        for name, about in queries.available().items():
            print(f"{name:28} {about}")
        return 0 if args.list else 2
    if not Path(args.db).is_file():
        raise ValueError(f"no store at {args.db}; create one with `otel-safety ingest` or `demo`")
    params = {}
    for item in args.param:
        name, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--param expects NAME=VALUE, got {item!r}")
        params[name.strip()] = value
    with duckdb.connect(args.db, read_only=True) as con:
        columns, rows = queries.run(con, queries.resolve_sql(args.sql), params)
    print(queries.render(columns, rows, args.format))
    return 0


def cmd_detectors(args: argparse.Namespace) -> int:
    for key, cls in sorted(detector_registry.available().items()):
        severity, threshold = cls.severity.value, cls.default_threshold
        print(f"{key:22} {severity:9} threshold {threshold:<5} {cls.description}")
    return 0


def _remove_old_store(path: Path) -> None:
    """The demo starts from an empty store, but only ever deletes a store of ours."""
    try:
        with duckdb.connect(str(path), read_only=True) as con:
            con.execute("SELECT 1 FROM otel_safety_meta LIMIT 1")
    except duckdb.Error as exc:
        raise ValueError(
            f"{path} exists and is not an otel-safety store; pass another --db"
        ) from exc
    path.unlink()
    Path(f"{path}.wal").unlink(missing_ok=True)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
