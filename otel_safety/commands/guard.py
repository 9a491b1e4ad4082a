"""CLI for the tool-call guard: `guard check`, `guard eval`, `principals`, `status`."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from otel_safety.commands.options import add_db, add_format
from otel_safety.config import from_environment
from otel_safety.guard.principals import (
    PRINCIPALS_ENV,
    UID_TRUST,
    Directory,
    Principal,
    PrincipalsError,
    Role,
    editing,
    validation_problems,
)

DEFAULT_PRINCIPALS = "principals.json"
FAIL_EXIT = 3
_FROM_ENV = f"${PRINCIPALS_ENV} if set, else none: trust is not checked"


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register `guard`, `principals` and `status` on the `otel-safety` parser."""
    _add_guard(sub)
    _add_principals(sub)
    status = sub.add_parser(
        "status",
        help="summarise the judged traces by level, the guard's audit log (allowed, warned, "
        "blocked, average risk), the GenAI spans that carried no content to judge, and the "
        "deep analysis tier",
        description="The judged traces per strictest escalation level (the escalated ones: "
        "`otel-safety query flagged_traces`). Totals of the tool-call decisions in the "
        "store's audit log (inline "
        "checks and calls judged on traces), overall and per verdict, with the most "
        "frequent blocking rules. The rows themselves: `otel-safety query audit`. GenAI "
        "spans that carried no content (content capture off in the instrumentation) are "
        "counted per service and dialect. The deep analysis tier: on or off (while off no "
        "trace content is sent anywhere), how it chooses traces, the analyses in the store "
        "and the counters (drops, skips) the last writing process left there.",
    )
    add_db(status, "store file")
    add_format(status)
    status.set_defaults(handler=cmd_status)


def _add_guard(sub: argparse._SubParsersAction) -> None:
    guard = sub.add_parser(
        "guard",
        help="check a tool call, or measure the guard on its labelled set",
        description="The tool-call guard judges a call by what it does (dangerous commands, "
        "credential access, exfiltration, ...) and who asked (principals and their trust).",
    )
    actions = guard.add_subparsers(dest="guard_command", metavar="ACTION")
    check = actions.add_parser(
        "check",
        help="judge one tool call and print the verdict",
        description="Judge one tool call as an app would inline, and print the verdict.",
        epilog='Example: otel-safety guard check run_shell \'{"command": "rm -rf ~"}\'. '
        f"Exit status 0, or {FAIL_EXIT} when --fail-on is given and the verdict reaches it.",
    )
    check.add_argument("tool", help="the tool's name, e.g. run_shell")
    check.add_argument(
        "arguments", nargs="?", default="{}", help="the call's arguments as JSON (default {})"
    )
    check.add_argument("--requester", help="principal id or platform uid of who asked")
    check.add_argument("--requester-name", help="display name the requester gave")
    check.add_argument(
        "--task",
        help="what the user asked the agent to do: a rule whose danger the task asks for in "
        'so many words ("delete all emails in my spam folder") then warns instead of blocking',
    )
    _principals_option(check, required=False)
    add_format(check)
    check.add_argument(
        "--fail-on", choices=("warn", "block"), help=f"exit {FAIL_EXIT} on this verdict or worse"
    )
    check.set_defaults(handler=cmd_guard_check)

    evaluate = actions.add_parser(
        "eval",
        help="measure block recall and false positives on a labelled set of tool calls",
        description="Run the guard over a labelled set of tool calls (the packaged set by "
        "default: otel_safety/evaluation/guard/) and report block recall and false "
        "positives, per attack pattern and per family. With --data, also line the "
        "guard's verdicts up with AgentDojo's attack-success labels, per model file.",
    )
    evaluate.add_argument(
        "--cases", type=Path, help="directory with tool_calls*.jsonl and principals.json"
    )
    evaluate.add_argument(
        "--data",
        type=Path,
        metavar="DIR",
        help="labelled data folder holding agentdojo/ (e.g. ../shared/data): adds the "
        "AgentDojo comparison",
    )
    evaluate.add_argument("--show-misses", action="store_true", help="list every wrong verdict")
    evaluate.set_defaults(handler=cmd_guard_eval)
    guard.set_defaults(handler=lambda args: _need_action(guard))


def _add_principals(sub: argparse._SubParsersAction) -> None:
    principals = sub.add_parser(
        "principals",
        help="list and edit the principals file (who may ask the agent for what)",
        description="Principals are the people and agents a deployment knows: role, trust "
        "0-4 (0 none, 1 read-only, 2 read + limited write, 3 all but destructive, 4 all), "
        "the platform uid that anchors their identity, and optionally the action "
        f"categories they may use. The guard reads the file named by {PRINCIPALS_ENV}.",
    )
    actions = principals.add_subparsers(dest="principals_command", metavar="ACTION")
    listing = actions.add_parser(
        "list", help="show the principals", description="Show the principals the file holds."
    )
    _principals_option(listing)
    add_format(listing)
    listing.set_defaults(handler=cmd_principals_list)
    editors = (
        ("add", "add a principal", "Add a new principal; refused if the id is taken."),
        (
            "set",
            "add or change a principal",
            "Change the options given on a principal (the others are kept), or add it.",
        ),
    )
    for verb, text, about in editors:
        editing = actions.add_parser(verb, help=text, description=about)
        _principals_option(editing)
        editing.add_argument("id", help="principal id (how audits name them)")
        editing.add_argument("--name", help="display name")
        editing.add_argument("--role", choices=[r.value for r in Role])
        editing.add_argument(
            "--trust",
            type=int,
            choices=range(5),
            metavar="0-4",
            help=f"needed for a new principal without --uid (with one: {UID_TRUST})",
        )
        editing.add_argument(
            "--uid",
            help="platform uid that anchors the identity; a new principal given one is "
            f"verified with trust {UID_TRUST} unless --no-verified / --trust say otherwise",
        )
        editing.add_argument("--channel", help="where they talk to the agent (slack, email, ...)")
        editing.add_argument(
            "--verified",
            action=argparse.BooleanOptionalAction,
            help="identity verified? (a new principal: yes with --uid, else no)",
        )
        editing.add_argument(
            "--allow",
            metavar="CATEGORIES",
            help="comma-separated categories they may use (narrows the trust level); "
            "'-' removes the narrowing",
        )
        editing.set_defaults(handler=cmd_principals_edit, replace=verb == "set")
    remove = actions.add_parser(
        "remove", help="remove a principal", description="Remove a principal from the file."
    )
    _principals_option(remove)
    remove.add_argument("id", help="principal id")
    remove.set_defaults(handler=cmd_principals_remove)
    principals.set_defaults(handler=lambda args: _need_action(principals))


def _principals_option(parser: argparse.ArgumentParser, required: bool = True) -> None:
    """`--file`: for `principals`, the file the guard reads (${PRINCIPALS_ENV}) when set."""
    default = (from_environment("principals") or DEFAULT_PRINCIPALS) if required else None
    shown = f"{default} [{PRINCIPALS_ENV}]" if required else _FROM_ENV
    parser.add_argument(
        "--file",
        "--principals",
        dest="principals",
        default=default,
        help=f"principals file (default {shown})",
    )


def _need_action(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


# --- guard check / eval ----------------------------------------------------------------------


def cmd_guard_check(args: argparse.Namespace) -> int:
    from otel_safety.guard import Guard

    try:
        arguments = json.loads(args.arguments, strict=False)  # raw newlines, as runtimes take
    except RecursionError:
        raise ValueError("arguments nest too deeply to read as JSON") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f'arguments must be JSON (e.g. \'{{"command": "ls"}}\'): {exc}') from None
    if not args.tool.strip():
        raise ValueError("give the tool's name, e.g. run_shell")
    directory = Directory.load(args.principals) if args.principals else Directory.from_env()
    requester: Any = None
    if args.requester or args.requester_name:
        requester = {"uid": args.requester, "name": args.requester_name}
    verdict = Guard(directory).check_tool_call(
        args.tool, arguments, requester, record=False, task=args.task
    )
    if args.format == "json":
        print(json.dumps(verdict.model_dump(mode="json"), indent=2))
    else:
        print(f"{verdict.decision.value}  risk {verdict.risk}  category {verdict.category}")
        if verdict.requester and verdict.trust is None:
            print(
                f"requester {verdict.requester} (no principals file: trust not checked"
                f"{_unused_default_file()})"
            )
        elif verdict.requester or verdict.trust is not None:
            who = (verdict.requester or "").strip() or "(blank)"
            print(f"requester {who} ({verdict.requester_role}, trust {verdict.trust})")
        elif directory.principals:
            print("no requester given: trust not checked (pass --requester)")
        for reason in verdict.reasons:
            print(f"  - {reason}")
    order = {"ALLOW": 0, "WARN": 1, "BLOCK": 2}
    if args.fail_on and order[verdict.decision.value] >= order[args.fail_on.upper()]:
        return FAIL_EXIT
    return 0


def cmd_guard_eval(args: argparse.Namespace) -> int:
    from otel_safety.evaluation.guard_bench import case_files, packaged_set, run_guard_bench

    directory = args.cases or packaged_set()
    if args.data and not (args.data / "agentdojo").is_dir():
        raise ValueError(f"{args.data} has no agentdojo/ folder (give the labelled data's root)")
    for path in case_files(directory):
        report = run_guard_bench(directory, path.name)
        print(f"**{path.name}**\n")
        print(report.markdown())
        if args.show_misses and report.misses:
            print("\nWrong verdicts:")
            for outcome in report.misses:
                case, verdict = outcome.case, outcome.verdict
                print(
                    f"- {case['id']}: expected {case['expect']}, got {verdict.decision.value} "
                    f"(risk {verdict.risk}; {', '.join(verdict.rule_ids) or 'no rule'})"
                )
        print()
    if args.data:
        from otel_safety.evaluation.guard_agentdojo import run_agentdojo_alignment

        print("**AgentDojo: guard verdicts against attack success**\n")
        print(run_agentdojo_alignment(args.data, progress=_progress).markdown())
    return 0


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# --- principals --------------------------------------------------------------------------------


def _load_or_new(path: str) -> Directory:
    return Directory.load(path) if Path(path).exists() else Directory()


def cmd_principals_list(args: argparse.Namespace) -> int:
    directory = Directory.load(args.principals)
    rows = [p.model_dump(mode="json") for p in directory.principals.values()]
    if args.format == "json":
        print(json.dumps(rows, indent=2))
        return 0
    from otel_safety.result_tables import render

    columns = ["id", "name", "role", "trust", "verified", "uid", "channel", "allowed_categories"]
    table = [[_cell(row.get(c)) for c in columns] for row in rows]
    print(render(columns, table))
    return 0


def _cell(value: Any) -> Any:
    return ",".join(value) if isinstance(value, list) else value


def cmd_principals_edit(args: argparse.Namespace) -> int:
    with editing(args.principals):
        return _edit(args)


def _edit(args: argparse.Namespace) -> int:
    directory = _load_or_new(args.principals)
    current = directory.principals.get(args.id)
    if current is not None and not args.replace:
        raise PrincipalsError(f"principal {args.id!r} already exists; use `principals set`")
    fields = current.model_dump() if current else {"id": args.id}
    for name in ("name", "role", "trust", "uid", "channel", "verified"):
        value = getattr(args, name)
        if value is not None:
            fields[name] = value
    if args.allow is not None:
        fields["allowed_categories"] = None if args.allow == "-" else _categories(args.allow)
    if "trust" not in fields and not fields.get("uid"):
        raise PrincipalsError(
            f"a new principal needs --trust 0-4, or --uid (then trust {UID_TRUST}) ({args.id!r})"
        )
    try:
        principal = Principal.model_validate(fields)
    except ValidationError as exc:
        raise PrincipalsError(f"principal {args.id!r}: {validation_problems(exc)}") from None
    directory.add(principal, replace=True)
    directory.save(args.principals)
    print(f"{'changed' if current else 'added'} {args.id} in {args.principals}")
    _say_if_beyond_trust(principal)
    _say_if_unread(args.principals)
    return 0


def _say_if_beyond_trust(principal: Principal) -> None:
    """An allowed category needing more trust than the principal has is still refused
    (`trust.insufficient`): say so now, not at the first blocked call."""
    from otel_safety.guard.data import current_guard_data

    needs = current_guard_data().trust
    beyond = [
        f"{category} (needs {needs[category]})"
        for category in principal.allowed_categories or ()
        if needs.get(category, 0) > principal.trust
    ]
    if beyond:
        print(
            f"note: {principal.id} has trust {principal.trust}, too little for "
            f"{', '.join(beyond)}: the guard still blocks those calls; raise --trust to "
            "allow them",
            file=sys.stderr,
        )


def _unused_default_file() -> str:
    """A hint when `principals add` wrote its default file here but nothing names it: the
    guard reads only --file or $OTEL_SAFETY_PRINCIPALS, never a file by its place."""
    if not Path(DEFAULT_PRINCIPALS).is_file():
        return ""
    return (
        f"; {DEFAULT_PRINCIPALS} here is read with --file {DEFAULT_PRINCIPALS} or {PRINCIPALS_ENV}"
    )


def _say_if_unread(path: str | Path) -> None:
    """The guard reads only the file $OTEL_SAFETY_PRINCIPALS names: say so when the file just
    written is not that one, or principals edited here would silently never apply."""
    named = from_environment("principals")
    if named and os.path.realpath(named) == os.path.realpath(path):
        return
    now = (
        f"the guard reads {PRINCIPALS_ENV}={named}, not this file"
        if named
        else f"{PRINCIPALS_ENV} is not set, so the guard reads no principals file"
    )
    print(
        f"note: {now}; set {PRINCIPALS_ENV}={os.path.abspath(path)} for configure(), serve "
        "and `guard check` to apply these principals (or pass --file to `guard check`)",
        file=sys.stderr,
    )


def _categories(text: str) -> list[str]:
    from otel_safety.guard.data import current_guard_data

    known = set(current_guard_data().trust)
    wanted = [c.strip() for c in text.split(",") if c.strip()]
    if not wanted:  # an empty list would allow nothing, and reads like no narrowing
        raise PrincipalsError(
            f"--allow {text!r} names no category: give categories such as read_files,"
            "web_read, or '-' to remove the narrowing"
        )
    unknown = [c for c in wanted if c not in known]
    if unknown:
        raise PrincipalsError(
            f"unknown categories {', '.join(unknown)}; known: {', '.join(sorted(known))}"
        )
    return wanted


def cmd_principals_remove(args: argparse.Namespace) -> int:
    with editing(args.principals):
        directory = Directory.load(args.principals)
        directory.remove(args.id)
        directory.save(args.principals)
    print(f"removed {args.id} from {args.principals}")
    return 0


# --- status ------------------------------------------------------------------------------------

STATUS_SQL = """
SELECT
    count(*) AS decisions,
    count(*) FILTER (WHERE verdict = 'ALLOW') AS allowed,
    count(*) FILTER (WHERE verdict = 'WARN') AS warned,
    count(*) FILTER (WHERE verdict = 'BLOCK') AS blocked,
    round(avg(risk), 1) AS average_risk,
    count(*) FILTER (WHERE source = 'inline') AS inline,
    count(DISTINCT requester) AS requesters,
    strftime(min(decided_at), '%Y-%m-%d %H:%M:%S') AS first,
    strftime(max(decided_at), '%Y-%m-%d %H:%M:%S') AS last
FROM audit
"""
TOP_RULES_SQL = """
SELECT rule, count(*) AS blocks
FROM (SELECT unnest(CAST(rule_ids AS VARCHAR[])) AS rule FROM audit WHERE verdict = 'BLOCK')
GROUP BY rule ORDER BY blocks DESC, rule LIMIT 5
"""

# Judged traces per strictest level, strictest first: what the detectors made of the runs,
# beside the guard's own decisions.
TRACE_LEVELS_SQL = """
SELECT escalation_level AS level, count(*) AS traces
FROM traces GROUP BY ALL ORDER BY max(escalation_rank) DESC
"""


# GenAI spans that carried no content, per service and dialect (see content_capture.py).
NO_CONTENT_SQL = """
SELECT coalesce(service_name, '(no service)') AS service, coalesce(dialect, '?') AS dialect,
    count(*) AS spans
FROM spans
WHERE EXISTS (SELECT 1 FROM unnest(CAST(notes AS VARCHAR[])) AS n(note) WHERE note LIKE ?)
GROUP BY ALL ORDER BY spans DESC, service, dialect
"""


def cmd_status(args: argparse.Namespace) -> int:
    from otel_safety.commands.stores import require_store
    from otel_safety.config import Settings
    from otel_safety.content_capture import NO_CONTENT_PATTERN
    from otel_safety.deep.status import deep_status, status_lines
    from otel_safety.exporters.duckdb import open_store
    from otel_safety.sidecar.backlog import backlog

    require_store(args.db)  # a missing store is the whole answer: nothing printed before it
    settings = Settings.resolve(db_path=args.db)
    waiting = backlog(args.db)
    with open_store(args.db) as con:
        listed = con.execute("SELECT table_name FROM information_schema.tables").fetchall()
        tables = {row[0] for row in listed}
        empty = (
            con.execute(NO_CONTENT_SQL, [NO_CONTENT_PATTERN]).fetchall()
            if "spans" in tables
            else []
        )
        levels = con.execute(TRACE_LEVELS_SQL).fetchall() if "traces" in tables else []
        if "audit" not in tables and not empty and not levels and not waiting:
            raise ValueError(f"{args.db} has no audit log yet (written by otel-safety 0.2+)")
        totals: dict[str, Any] = {"decisions": 0}
        top: list[Any] = []
        if "audit" in tables:
            cursor = con.execute(STATUS_SQL)
            names = [d[0] for d in cursor.description]
            totals = dict(zip(names, cursor.fetchone(), strict=True))
            top = con.execute(TOP_RULES_SQL).fetchall()
        deep = deep_status(settings, con)
    without_content = [{"service": s, "dialect": d, "spans": n} for s, d, n in empty]
    if args.format == "json":
        print(
            json.dumps(
                {
                    **totals,
                    "top_block_rules": dict(top),
                    "traces_by_level": dict(levels),
                    "spans_without_content": without_content,
                    "deep_analysis": deep,
                    "spool_backlog": [dataclasses.asdict(b) for b in waiting],
                },
                default=str,
                indent=2,
            )
        )
        return 0
    for waited in waiting:
        print(waited.line(args.db))
    _print_without_content(without_content)
    _print_trace_levels(levels, args.db)
    for line in status_lines(deep, settings):
        print(line)
    if not totals["decisions"]:
        print(f"{args.db}: no tool-call decisions recorded yet")
        return 0
    decisions, requesters = totals["decisions"], totals["requesters"]
    by = f" by {requesters} requester{'s' if requesters != 1 else ''}" if requesters else ""
    print(
        f"{decisions} tool-call decision{'s' if decisions != 1 else ''} "
        f"({totals['inline']} inline){by}, {totals['first']} .. {totals['last']}"
    )
    print(
        f"allowed {totals['allowed']}  warned {totals['warned']}  blocked {totals['blocked']}  "
        f"average risk {totals['average_risk']}"
    )
    if top:
        print("most frequent blocking rules: " + ", ".join(f"{r} ({n})" for r, n in top))
    return 0


def _print_trace_levels(levels: list[tuple[str, int]], db: str) -> None:
    """What the detectors made of the judged runs: the guard's totals below count only
    tool-call decisions, and a store full of HARD_STOPs must not read as all allowed."""
    if not levels:
        return
    total = sum(n for _, n in levels)
    counts = ", ".join(f"{level} {n}" for level, n in levels)
    print(f"{total} trace{'s' if total != 1 else ''} judged, by strictest level: {counts}")
    if any(level != "NONE" for level, _ in levels):
        print(f"the escalated ones, open first: otel-safety query flagged_traces --db {db}")


def _print_without_content(rows: list[dict[str, Any]]) -> None:
    """Name the spans nothing could be judged in, and say how to fix it."""
    if not rows:
        return
    total = sum(row["spans"] for row in rows)
    where = ", ".join(f"{r['service']} ({r['dialect']}) {r['spans']}" for r in rows)
    print(
        f"{total} GenAI spans carried no content, so nothing in them was judged: {where}; "
        "turn the instrumentation's content capture on (README, 'Content capture')"
    )
