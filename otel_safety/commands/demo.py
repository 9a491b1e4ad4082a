"""`otel-safety demo`: scripted agents through the drop-in setup, then what was flagged."""

from __future__ import annotations

import argparse
from pathlib import Path

from otel_safety.commands.options import add_db
from otel_safety.commands.stores import DEMO_DB, invoked_as, remove_old_store
from otel_safety.extras import install_hint

# What a user adds to the demo's store by hand, lost when a re-run replaces it.
ADDED_BY_HAND = {"labels": "true", "resolutions": "true", "halts": "true"}


def add_commands(sub: argparse._SubParsersAction) -> None:
    demo = sub.add_parser(
        "demo",
        help="run scripted agents through otel-safety and show what was flagged",
        description="Run scripted pydantic-ai agents with real local tools through the "
        "drop-in setup, then print the flagged spans from the DuckDB store.",
    )
    add_db(demo, "store file to create", DEMO_DB)
    demo.set_defaults(handler=cmd_demo)


def cmd_demo(args: argparse.Namespace) -> int:
    try:
        from otel_safety.demo import DEMO_MARK, run_demo
    except ImportError as exc:
        print(f"otel-safety demo needs pydantic-ai: {install_hint('demo')} ({exc})")
        return 1
    path = Path(args.db)
    if path.exists():
        remove_old_store(path, DEMO_MARK, "otel-safety demo", warn_of=ADDED_BY_HAND)
    run_demo(str(path), command=invoked_as())
    return 0
