"""`otel-safety approvals` (list the guard's approval requests), `approve ID`, `deny ID`,
`withdraw ID` (take an answer back)."""

from __future__ import annotations

import argparse
import getpass
import json
import os
import shlex
from typing import Any

from otel_safety.commands.options import DEFAULT_DB, add_db, add_format, whole_number
from otel_safety.commands.stores import require_store
from otel_safety.config import env_name

DB_ENV = env_name("db_path")


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register `approvals`, `approve`, `deny` and `withdraw` on the `otel-safety` parser."""
    db_help = f"store file the guard writes (default ${DB_ENV} if set, else {DEFAULT_DB})"
    listing = sub.add_parser(
        "approvals",
        help="list the guard's approval requests waiting for an answer",
        description="The tool calls the guard asked a person about: pending ones (oldest "
        "first) by default, or the latest of any status with --recent. Answer one with "
        "`otel-safety approve ID` or `otel-safety deny ID`.",
    )
    add_db(listing, help=db_help)
    listing.add_argument(
        "--recent",
        type=whole_number(1),
        metavar="N",
        help="show the latest N requests of any status instead of the pending ones",
    )
    add_format(listing)
    listing.set_defaults(handler=cmd_approvals)
    for verb, approved in (("approve", True), ("deny", False)):
        answer = sub.add_parser(
            verb,
            help=f"{verb} a pending approval request (the guard then "
            f"{'allows' if approved else 'blocks'} the call)",
            description=f"{verb.capitalize()} the pending approval request ID (like safety-3; "
            "`otel-safety approvals` lists them). The guard waiting on it goes on at once; "
            "the answer is recorded with who gave it and reused for the same requester and "
            "a similar call until OTEL_SAFETY_APPROVAL_TTL runs out.",
        )
        _id_note_by_db(answer, "who answers", db_help)
        answer.set_defaults(handler=cmd_decide, approved=approved)
    withdraw = sub.add_parser(
        "withdraw",
        help="take back an approval or a denial: similar calls are asked about again",
        description="Withdraw the answer to approval request ID (like safety-3; `otel-safety "
        "approvals --recent 20` lists the latest): it is no longer reused, so the guard asks "
        "a person about the next similar call again. Calls it already decided stay decided.",
    )
    _id_note_by_db(withdraw, "who withdraws it", db_help)
    withdraw.set_defaults(handler=cmd_withdraw)


def _id_note_by_db(parser: argparse.ArgumentParser, who: str, db_help: str) -> None:
    parser.add_argument("id", metavar="ID", help="the request's id, like safety-3")
    parser.add_argument("--note", help="why, for the audit trail")
    parser.add_argument(
        "--by", default=os_user(), help=f"{who} (default: the OS user, %(default)s)"
    )
    add_db(parser, help=db_help)


_APP_STORE = "; give the store the application writes with --db (or OTEL_SAFETY_DB)"


def cmd_approvals(args: argparse.Namespace) -> int:
    from otel_safety.approvals.store import ApprovalStore

    require_store(args.db, _APP_STORE)
    store = ApprovalStore(args.db, create=False)
    approvals = store.recent(args.recent) if args.recent else store.pending()
    if args.format == "json":
        print(json.dumps([a.model_dump(mode="json") for a in approvals], indent=2))
        return 0
    if not approvals:
        print(f"no {'approval requests' if args.recent else 'pending approvals'} in {args.db}")
        return 0
    from otel_safety.result_tables import render, terminal_safe

    columns = ["id", "status", "created", "expires", "requester", "tool", "risk", "summary"]
    rows: list[tuple[Any, ...]] = [
        (
            a.id,
            a.status + (f" by {a.decided_by}" if a.decided_by else ""),
            f"{a.created_at:%Y-%m-%d %H:%M:%S}",
            f"{a.expires_at:%H:%M:%S}",
            a.requester or "",
            a.tool,
            a.risk,
            a.summary,
        )
        for a in approvals
    ]
    print(render(columns, rows))
    if not args.recent:
        # The table cuts long cells; whoever answers must see the whole call they approve
        # (a summary quotes only the part a rule matched: `chmod 777 f; rm -rf ~`).
        for a in approvals:
            print(f"\n{a.id}: {terminal_safe(a.tool)} with {terminal_safe(a.arguments)}")
        db = f" --db {shlex.quote(str(args.db))}"  # the store listed, whatever the default
        print(f"answer with: otel-safety approve ID{db} [--note ...] | otel-safety deny ID{db}")
    return 0


def cmd_decide(args: argparse.Namespace) -> int:
    from otel_safety.approvals.store import ApprovalStore

    require_store(args.db, _APP_STORE)
    approval = ApprovalStore(args.db, create=False).decide(
        args.id, args.approved, by=args.by, note=args.note
    )
    from otel_safety.result_tables import terminal_safe

    print(
        f"{approval.status} {approval.id} as {terminal_safe(approval.decided_by or '')}: "
        f"{terminal_safe(approval.summary)}"
    )
    return 0


def cmd_withdraw(args: argparse.Namespace) -> int:
    from otel_safety.approvals.store import ApprovalStore
    from otel_safety.result_tables import terminal_safe

    require_store(args.db, _APP_STORE)
    approval = ApprovalStore(args.db, create=False).withdraw(args.id, by=args.by, note=args.note)
    print(
        f"withdrew the answer to {approval.id} as {terminal_safe(approval.decided_by or '')} "
        f"({terminal_safe(approval.note or '')}): the guard asks about the next similar call "
        "again"
    )
    return 0


def os_user() -> str:
    try:
        return getpass.getuser()
    except (OSError, KeyError):  # no login name and no passwd entry (some containers)
        return f"uid-{os.getuid()}" if hasattr(os, "getuid") else "unknown"
