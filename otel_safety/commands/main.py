"""The `otel-safety` command: one parser, each subcommand registered by its module here."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

import duckdb

from otel_safety import __version__, queries
from otel_safety.commands import (
    approvals,
    calibration,
    dashboard,
    demo,
    detectors,
    evaluate,
    guard,
    ingest,
    labels,
    query,
    report,
    resolve,
    serve,
)
from otel_safety.config import ConfigError
from otel_safety.exporters.duckdb import StoreError

# In the order `otel-safety --help` lists them.
COMMANDS = (
    demo,
    ingest,
    query,
    evaluate,
    detectors,
    calibration,
    labels,
    report,
    serve,
    guard,
    approvals,
    resolve,
    dashboard,
)


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
    for command in COMMANDS:
        command.add_commands(sub)
    return parser


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
