"""`otel-safety` command line: demo, ingest, query, detectors."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

import duckdb

from otel_safety import __version__, queries
from otel_safety import detectors as detector_registry
from otel_safety.approvals.command import add_commands as add_approval_commands
from otel_safety.behavior import BehaviorMonitor
from otel_safety.bootstrap import build_engine
from otel_safety.calibration.command import add_commands as add_calibration_commands
from otel_safety.config import ConfigError, Settings, default_db_path
from otel_safety.dashboard.command import add_dashboard_command
from otel_safety.detectors.datafiles import current_data_dir, stray_data_files
from otel_safety.exporters.duckdb import StoreError, mark_store, open_store
from otel_safety.guard.command import add_commands as add_guard_commands
from otel_safety.resolutions.command import add_resolve_command
from otel_safety.sidecar.command import add_command as add_serve_command
from otel_safety.sidecar.command import workers_count

DEFAULT_DB = default_db_path()  # OTEL_SAFETY_DB, as for configure() and serve
DEMO_DB = "otel-safety-demo.duckdb"
EVAL_DB = "otel-safety-eval.duckdb"
EVAL_MARK = "otel-safety eval"
DATASET_NAMES = ("xstest", "jailbreakbench", "agentdojo", "bipia", "direct_injection", "synthetic")


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
    except (ConfigError, StoreError, queries.QueryError, ValueError, OSError, duckdb.Error) as exc:
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
        "the detectors and write spans and findings to the store. Ingesting a file again "
        "replaces its rows instead of adding copies.",
        epilog="Bad lines are reported and skipped. Exit status: 0 when spans were read "
        "(even if some lines were bad), 1 when nothing could be read or on an error.",
    )
    ingest.add_argument(
        "files",
        nargs="+",
        metavar="FILE",
        help="OTLP/JSON file(s), or directories holding .json/.jsonl/.gz files",
    )
    ingest.add_argument("--db", default=DEFAULT_DB, help=f"store file (default {DEFAULT_DB})")
    ingest.add_argument(
        "--detectors", help="comma-separated detector keys (default: all; see `detectors`)"
    )
    ingest.add_argument(
        "--decision-wait",
        type=float,
        help="seconds of span time a trace may stay idle before it is judged (default 30)",
    )
    ingest.add_argument(
        "--workers",
        type=workers_count,
        help="detection processes (default: one per core; 0 judges in this process) "
        "[OTEL_SAFETY_WORKERS]",
    )
    ingest.add_argument("--quiet", action="store_true", help="no progress, only the summary")
    ingest.set_defaults(handler=cmd_ingest)

    query = sub.add_parser(
        "query",
        help="run a named query from queries/ or ad-hoc SQL",
        description="Run a query over the store. NAME is a file of queries/ without .sql "
        "(see --list), a path to a .sql file, or SQL text.",
    )
    query.add_argument(
        "sql", nargs="?", metavar="NAME|SQL", help="a named query, a .sql file, or SQL text"
    )
    query.add_argument("--db", default=DEFAULT_DB, help=f"store file (default {DEFAULT_DB})")
    query.add_argument(
        "--format",
        choices=("table", "csv", "json"),
        default="table",
        help="output format (default: table)",
    )
    query.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="set a query parameter (a DuckDB variable); repeatable",
    )
    query.add_argument(
        "--lake",
        metavar="CATALOG",
        help="query a DuckLake written by `serve --lake` instead of --db "
        "(e.g. 'postgres:dbname=lake host=db user=otel'; needs the lake extra)",
    )
    query.add_argument("--list", action="store_true", help="list the named queries")
    query.set_defaults(handler=cmd_query)

    evaluate = sub.add_parser(
        "eval",
        help="measure the detectors on labelled data",
        description="Turn every usable row of the labelled datasets (XSTest, JailbreakBench, "
        "AgentDojo, BIPIA, jailbreak prompts versus benign requests) and our synthetic sets "
        "into GenAI spans, run them through the same pipeline as live traffic, store findings "
        "and labels, and print precision, recall and F1 with 95% bootstrap intervals and the "
        "always-fire baseline, per detector and dataset. Synthetic rows are reported apart.",
    )
    evaluate.add_argument(
        "--data",
        default="../shared/data",
        help="folder of the labelled datasets (default ../shared/data)",
    )
    evaluate.add_argument(
        "--db",
        default=EVAL_DB,
        help=f"store to write, replaced on every run (default {EVAL_DB}); a file that "
        "`eval` did not make is never touched",
    )
    evaluate.add_argument(
        "--datasets",
        help="comma-separated subset: " + ", ".join(DATASET_NAMES),
    )
    evaluate.add_argument("--detectors", help="comma-separated detector keys (default: all)")
    evaluate.add_argument(
        "--sample",
        type=_positive,
        metavar="N",
        help="only N rows per dataset, the same ones on every run",
    )
    evaluate.add_argument(
        "--resamples", type=_positive, default=1000, help="bootstrap resamples (default 1000)"
    )
    evaluate.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    evaluate.add_argument(
        "--in-sample",
        action="store_true",
        help="skip the out-of-sample pass (refitting each learned judge without the group "
        "being scored, which needs the train extra) and report the packaged judges' figures",
    )
    evaluate.add_argument(
        "--format",
        choices=("table", "json", "markdown"),
        default="table",
        help="output format (default: table)",
    )
    evaluate.add_argument(
        "--deep",
        action="store_true",
        help="also send the agent-trajectory rows (agentdojo) to the deep analysis model "
        "(OTEL_SAFETY_DEEP_BASE_URL or OPENAI_BASE_URL, OTEL_SAFETY_DEEP_MODEL) and print its "
        "figures beside the rule tier's, with its cost per 1,000 traces; this sends those "
        "rows' content to that endpoint",
    )
    evaluate.add_argument(
        "--deep-model", help="model name for --deep (default: OTEL_SAFETY_DEEP_MODEL)"
    )
    evaluate.set_defaults(handler=cmd_eval)

    listing = sub.add_parser(
        "detectors",
        help="list the registered detectors",
        description="List every registered detector: key, severity, default threshold, "
        "what it flags. With --check, build each one as the pipeline would (data files from "
        "OTEL_SAFETY_DATA_DIR, thresholds, calibration, monitor modes from the environment) "
        "and show the threshold and mode in force; exit 1 naming any that cannot load.",
    )
    listing.add_argument(
        "--check",
        action="store_true",
        help="load every detector's data and settings and report problems",
    )
    listing.set_defaults(handler=cmd_detectors)
    add_calibration_commands(sub)
    add_serve_command(sub)
    add_guard_commands(sub, DEFAULT_DB)
    add_approval_commands(sub, DEFAULT_DB)
    add_resolve_command(sub, DEFAULT_DB)
    add_dashboard_command(sub, DEFAULT_DB)
    return parser


def cmd_demo(args: argparse.Namespace) -> int:
    try:
        from otel_safety.demo import DEMO_MARK, run_demo
    except ImportError as exc:
        print(f"otel-safety demo needs pydantic-ai: pip install 'otel-safety[demo]' ({exc})")
        return 1
    path = Path(args.db)
    if path.exists():
        _remove_old_store(path, DEMO_MARK, "otel-safety demo")
    run_demo(str(path), command=_invoked_as())
    return 0


def cmd_ingest(args: argparse.Namespace) -> int:
    from otel_safety.ingest import ingest_files, trace_files

    settings = Settings.resolve(
        db_path=args.db,
        detectors=args.detectors.split(",") if args.detectors else None,
        decision_wait=args.decision_wait,
        workers=args.workers,
    )
    detector_registry.check(settings.detectors, settings.thresholds)  # fail before any file
    files = trace_files(args.files)
    fresh = not Path(settings.db_path).exists()
    summary = ingest_files(files, settings, progress=None if args.quiet else sys.stderr)
    print(summary.describe(settings.db_path))
    if fresh and not summary.spans:  # nothing read: leave no empty store behind
        Path(settings.db_path).unlink(missing_ok=True)
        Path(f"{settings.db_path}.wal").unlink(missing_ok=True)
        print(f"no spans read, so {settings.db_path} was not kept")
    if summary.quarantined:
        return 1  # a loss is never silent, nor a success
    return 0 if summary.spans or not summary.bad_lines else 1


def cmd_query(args: argparse.Namespace) -> int:
    if args.list or not args.sql:
        if not args.list:
            print("give a query NAME, a .sql file or SQL text; the named queries are:\n")
        for name, about in queries.available().items():
            params = queries.parameters(queries.resolve_sql(name))
            print(f"{name:24} {about}")
            if params:
                print(f"{'':24} parameters: {', '.join(params)}")
        return 0 if args.list else 2
    params = {}
    for item in args.param:
        name, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--param expects NAME=VALUE, got {item!r}")
        params[name.strip()] = value
    sql = queries.resolve_sql(args.sql)
    if args.lake:
        from otel_safety.exporters.ducklake import connect

        con = connect(args.lake, read_only=True)
    else:
        con = open_store(args.db, wait=5.0, hint="; create one with `otel-safety ingest` or `demo`")
    with con:
        columns, rows = queries.run(con, sql, params, parse_json=args.format == "json")
    print(queries.render(columns, rows, args.format))
    limit = queries.row_limit(sql, params)
    if limit is not None and len(rows) == limit:
        print(f"(stopped at {limit} rows; --param limit_rows=N shows more)", file=sys.stderr)
    return 0


def _stderr_line(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def cmd_eval(args: argparse.Namespace) -> int:
    import json

    from otel_safety.evaluation import datasets
    from otel_safety.evaluation.held_out import HeldOutJudges, training_available
    from otel_safety.evaluation.runner import run_eval

    detectors = args.detectors.split(",") if args.detectors else None
    detector_registry.check(detectors)  # fail before reading data or making a store
    if not args.in_sample and not training_available():
        print(
            "eval: the out-of-sample figures refit the learned judges, which needs "
            "scikit-learn: pip install 'otel-safety[train]' (or pass --in-sample)",
            file=sys.stderr,
        )
        return 2
    deep = None
    if args.deep:
        from otel_safety.deep.settings import deep_config

        deep = {"deep_model": args.deep_model}
        deep_config(Settings.resolve(deep=True, **deep))  # no endpoint: say so before any work
    elif args.deep_model:
        raise ValueError("--deep-model is for --deep")
    names = args.datasets.split(",") if args.datasets else None
    cases = datasets.load(Path(args.data), names)
    if args.sample:
        cases = datasets.sample(cases, args.sample)
    print(f"eval: {len(cases)} cases from {args.data}", file=sys.stderr)
    if Path(args.db).exists():
        _remove_old_store(Path(args.db), EVAL_MARK, "otel-safety eval")
    report = run_eval(
        cases,
        args.db,
        detectors=detectors,
        resamples=args.resamples,
        seed=args.seed,
        progress=sys.stderr,
        sampled=args.sample,
        held_out=None if args.in_sample else HeldOutJudges(Path(args.data), _stderr_line),
        deep=deep,
    )
    mark_store(args.db, EVAL_MARK)
    if not report.rows:
        print(
            "eval: no row of these datasets is labelled for these detectors; see the "
            "README's evaluation section for which dataset labels which detector",
            file=sys.stderr,
        )
    if args.format == "json":
        print(json.dumps(report.as_dict(), indent=2))
    elif args.format == "markdown":
        print(report.markdown())
    else:
        print(report.table())
        if report.escalation is not None:
            print("\nThe escalation ladder on AgentDojo runs:")
            print(report.escalation.text())
        print("\nWhere a dataset has no label for a detector, how often it fires anyway:")
        print(report.firing_table())
        if report.deep is not None:
            print(f"\n{report.deep.heading()}")
            print(report.deep.text())
        print(
            f"\n{report.cases} cases in {report.seconds:.0f}s; findings and labels in "
            f"{args.db}. Intervals: 95% bootstrap, {args.resamples} resamples, seed {args.seed}."
        )
    return 0


def cmd_detectors(args: argparse.Namespace) -> int:
    if args.check:
        return _check_detectors()
    for key, cls in sorted(detector_registry.available().items()):
        severity = "by mode" if issubclass(cls, BehaviorMonitor) else cls.severity.value
        threshold = cls.default_threshold
        print(f"{key:22} {severity:9} threshold {threshold:<5} {cls.description}")
    return 0


def _check_detectors() -> int:
    """Every detector built from the settings in force, one line each; failures named."""
    settings = Settings.resolve()
    failed: list[str] = []
    engine = build_engine(
        settings,
        [],
        background=False,
        on_detector_error=lambda key, exc: failed.append(f"{key}: {exc}"),
    )
    folder = current_data_dir()  # the settings' folder, handed down by build_engine
    if folder:
        print(f"data folder: {folder}")
        failed.extend(stray_data_files(folder))
    for detector in engine.pipeline.detectors:
        mode = getattr(detector, "mode", None)
        shown = f"mode {mode.value:8}" if mode is not None else " " * 13
        print(f"{detector.key:22} ok   threshold {detector.threshold:<6} {shown}")
    for problem in failed:
        print(f"{problem}", file=sys.stderr)
    print(f"{len(engine.pipeline.detectors)} detector(s) loaded, {len(failed)} problem(s)")
    return 1 if failed else 0


def _remove_old_store(path: Path, mark: str, command: str) -> None:
    """Demo and eval start from an empty store, but only ever delete one they made."""
    try:
        with duckdb.connect(str(path), read_only=True) as con:
            ours = con.execute(
                "SELECT value FROM otel_safety_meta WHERE key = 'origin'"
            ).fetchone() == (mark,)
    except duckdb.Error:
        ours = False
    if not ours:
        raise ValueError(f"{path} exists and was not made by `{command}`; pass another --db")
    path.unlink()
    Path(f"{path}.wal").unlink(missing_ok=True)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _invoked_as() -> str:
    """How to call us again: the bare name when it is on PATH, else the path used."""
    program = Path(sys.argv[0])
    if program.name == "otel-safety" and shutil.which("otel-safety") != str(program.resolve()):
        return str(program)
    return "otel-safety"


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
