"""Options and argument types the commands share, declared once so each reads and checks
alike; their defaults come from the one settings model (`otel_safety.config.Settings`)."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import Any

from otel_safety.config import default_db_path, env_name

__all__ = [
    "DEFAULT_DB",
    "add_db",
    "add_detectors",
    "add_format",
    "add_workers",
    "detector_keys",
    "whole_number",
    "workers_count",
]

# The store a command reads when --db is not given: OTEL_SAFETY_DB, as for configure() and
# serve, else the settings' default.
DEFAULT_DB = default_db_path()


def whole_number(minimum: int) -> Callable[[str], int]:
    """An argparse type: a whole number of at least `minimum`, or an error that says so."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected {minimum} or more, got {value}")
        return value

    return parse


workers_count = whole_number(0)  # a count of detection processes: 0 judges in-process


def add_db(
    parser: Any, what: str = "store", default: str | None = None, help: str | None = None
) -> None:
    """`--db`: the store file, `DEFAULT_DB` unless the command makes its own (demo, eval)."""
    own = default is not None  # a file the command makes for itself: the variable is not read
    default = DEFAULT_DB if default is None else default
    variable = "" if own else f" [{env_name('db_path')}]"
    parser.add_argument(
        "--db", default=default, help=help or f"{what} (default {default}){variable}"
    )


def add_detectors(parser: Any, help: str) -> None:
    """`--detectors`: comma-separated detector keys, split (and checked for one) as parsed;
    every help says how to leave some out (argparse takes `--detectors -x` for an option)."""
    parser.add_argument(
        "--detectors",
        type=_keys,
        help=f"{help}; every detector but some: --detectors=-over_refusal,-deception",
    )


def _keys(value: str) -> list[str]:
    keys = [key.strip() for key in value.split(",") if key.strip()]
    if not keys:
        raise argparse.ArgumentTypeError(
            f"no detector key in {value!r}; name keys like 'injection,tool_guard' "
            "(`otel-safety detectors` lists them), or leave it out for all"
        )
    return keys


def detector_keys(value: list[str] | None) -> list[str] | None:
    """The keys `--detectors` names, None when not given (the settings then decide)."""
    return value or None


def add_format(
    parser: Any, choices: Sequence[str] = ("table", "json"), help: str | None = None
) -> None:
    """`--format`: how the output is written, the first choice by default; every command's
    `--help` says so, whether or not it words its own help."""
    help = help or f"output format (default {choices[0]})"
    parser.add_argument("--format", choices=tuple(choices), default=choices[0], help=help)


def add_workers(parser: Any, help: str) -> None:
    """`--workers`: detection processes (OTEL_SAFETY_WORKERS when not given)."""
    parser.add_argument("--workers", type=workers_count, help=help)
