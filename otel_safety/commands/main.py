"""The `otel-safety` command: one parser, each subcommand registered by its module here.

A run imports only the module of the command it runs (`otel-safety query` does not load the
detectors, the sidecar or the evaluation sets); `--help` and a mistyped command import all.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import os
import sys
from collections.abc import Sequence
from types import ModuleType

import duckdb

from otel_safety import __version__, queries
from otel_safety.config import ConfigError
from otel_safety.exporters.duckdb import StoreError

# Each command's module, in the order `--help` lists them (`tests/test_cli.py` holds this to
# what the modules add).
COMMANDS = {
    "demo": "demo",
    "ingest": "ingest",
    "query": "query",
    "eval": "evaluate",
    "detectors": "detectors",
    "calibrate": "calibration",
    "label": "labels",
    "labels": "labels",
    "report": "report",
    "serve": "serve",
    "guard": "guard",
    "principals": "guard",
    "status": "guard",
    "approvals": "approvals",
    "approve": "approvals",
    "deny": "approvals",
    "withdraw": "approvals",
    "halt": "halts",
    "unhalt": "halts",
    "halts": "halts",
    "resolve": "resolve",
    "forget": "forget",
    "dashboard": "dashboard",
}
# The modules of `otel_safety.commands` that add commands.
MODULES = tuple(dict.fromkeys(COMMANDS.values()))


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(_command_named(argv))
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # said by the command's own parser, whose usage lists what it takes
        _parser_of(parser, argv).error(f"unrecognized arguments: {' '.join(unknown)}")
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


def _parser_of(parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.ArgumentParser:
    """The parser of the innermost command `argv` names (`guard check`, not `guard`)."""
    words = iter(argv)
    while True:
        commands = next(
            (a.choices for a in parser._actions if isinstance(a, argparse._SubParsersAction)),
            None,
        )  # argparse keeps its subcommands only there
        if not commands:
            return parser
        chosen = next((word for word in words if word in commands), None)
        if chosen is None:
            return parser
        parser = commands[chosen]


class Parser(argparse.ArgumentParser):
    """argparse's parser, which names the closest choices to a mistyped one (a command, a
    subcommand, a --format): Python 3.14's `suggest_on_error`, which 3.11 lacks."""

    def _check_value(self, action: argparse.Action, value: object) -> None:
        choices = action.choices
        if choices is None or value in choices or not isinstance(value, str):
            return super()._check_value(action, value)
        close = difflib.get_close_matches(value, [str(c) for c in choices], n=3)
        if not close:
            return super()._check_value(action, value)
        listed = ", ".join(map(repr, choices))
        raise argparse.ArgumentError(
            action,
            f"invalid choice: {value!r}; did you mean: {', '.join(close)}? (choose from {listed})",
        )


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser with every command, or with `command`'s module's commands alone."""
    parser = Parser(
        prog="otel-safety",
        description="Agent-safety detectors over OpenTelemetry GenAI spans, stored in DuckDB.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    names = MODULES if command is None else (COMMANDS[command],)
    for name in names:
        _module(name).add_commands(sub)
    return parser


def _module(name: str) -> ModuleType:
    return importlib.import_module(f"otel_safety.commands.{name}")


def _command_named(argv: Sequence[str]) -> str | None:
    """The command the arguments run, when their first word names one (options before it
    are the top-level `--help` and `--version`, which want every command listed)."""
    first = argv[0] if argv else None
    return first if first in COMMANDS else None


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
