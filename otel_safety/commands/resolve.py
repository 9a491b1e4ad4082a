"""`otel-safety resolve TRACE_ID --note ...`: mark a trace's alerts as dealt with."""

from __future__ import annotations

import argparse

from otel_safety.commands.options import add_db
from otel_safety.commands.stores import require_store
from otel_safety.resolutions.store import default_resolver, resolve


def add_commands(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "resolve",
        help="mark a flagged trace (or one detector's alert on it) as resolved",
        description="Record that the alerts of TRACE_ID were looked at and dealt with: who, "
        "when and the notes. The queries that list alerts (flagged_traces, flagged_spans) "
        "then leave it out unless given --param include_resolved=true. Nothing is deleted: "
        "every resolution stays in the resolutions table, the latest one is in force.",
    )
    parser.add_argument("trace_id", metavar="TRACE_ID", help="32 hex digits, as in the queries")
    parser.add_argument(
        "--detector", help="resolve only this detector's alert (default: every alert of the trace)"
    )
    parser.add_argument("--note", required=True, help="what was found and done (free text)")
    parser.add_argument(
        "--by", default=None, help="who resolves it (default: the user running the command)"
    )
    parser.add_argument(
        "--reopen", action="store_true", help="undo an earlier resolution with the same detector"
    )
    add_db(parser)
    parser.set_defaults(handler=cmd_resolve)


def cmd_resolve(args: argparse.Namespace) -> int:
    require_store(args.db)
    done = resolve(
        args.db,
        args.trace_id,
        by=args.by or default_resolver(),
        note=args.note,
        detector=args.detector,
        resolved=not args.reopen,
    )
    what = (
        f"{done.detector} on trace {done.trace_id}" if done.detector else f"trace {done.trace_id}"
    )
    verb = "resolved" if done.resolved else "reopened"
    print(f"{verb} {what} by {done.resolved_by} at {done.resolved_at:%Y-%m-%d %H:%M:%S} UTC")
    return 0
