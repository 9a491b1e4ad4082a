"""What the dashboard shows, read from the store with the report's code and the SQL kit.

Every read opens the store read-only for one panel and closes it at once: a writer (an app
using configure(), `serve`) opens the file about once a second to write, so the dashboard
slips in between and waits out a lock for a moment when it lands on one.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import duckdb

from otel_safety import queries
from otel_safety.approvals.halt_rows import IN_FORCE, StoredHalt, select_halts
from otel_safety.exporters.duckdb import StoreError, open_store
from otel_safety.report.data import store_totals, timeline
from otel_safety.report.svg import stacked_bars

T = TypeVar("T")
READ_WAIT = 5.0


class StoreBusy(StoreError):
    """The store could not be read now: locked for longer than a page should wait (the next
    refresh retries), or, when `lasting`, gone or unreadable until someone acts."""

    def __init__(self, message: str, lasting: bool = False) -> None:
        super().__init__(message)
        self.lasting = lasting


def read(
    db_path: str | Path,
    work: Callable[[duckdb.DuckDBPyConnection], T],
    *,
    beside_writer: bool = False,
) -> T:
    """Run `work` on a connection opened for it alone: read-only, or, in the process that
    writes the store (`serve --dashboard`), one like the writer's, so the two share the
    file instead of refusing each other (DuckDB lets a process open a file one way only)."""
    try:
        con = open_store(db_path, read_only=not beside_writer, wait=READ_WAIT)
    except StoreError as exc:
        raise StoreBusy(str(exc), lasting="held by another process" not in str(exc)) from exc
    with con:
        return work(con)


def rows(con: duckdb.DuckDBPyConnection, name: str, **params: str | None) -> list[dict[str, Any]]:
    """A named query's rows as dicts, JSON columns parsed; None parameters are left unset."""
    given = {k: v for k, v in params.items() if v is not None and v != ""}
    columns, found = queries.run(con, queries.resolve_sql(name), given, parse_json=True)
    return [dict(zip(columns, row, strict=True)) for row in found]


def count(con: duckdb.DuckDBPyConnection, name: str, **params: str) -> int:
    """How many rows a named query has, without fetching them (no row limit)."""
    sql = queries.resolve_sql(name).rstrip().removesuffix(";")
    given = (
        {"limit_rows": str(2**62), **params} if "limit_rows" in queries.parameters(sql) else params
    )
    _, found = queries.run(con, f"SELECT count(*) FROM ({sql})", given)
    return int(found[0][0])


@dataclass
class Escalations:
    totals: dict[str, int]
    bucket: str
    chart: str  # inline SVG, the report's chart
    open_traces: int


def escalations(con: duckdb.DuckDBPyConnection) -> Escalations:
    bucket, series = timeline(con)
    chart = stacked_bars(series, bucket) if series else ""
    open_traces = count(con, "flagged_traces")
    return Escalations(store_totals(con), bucket, chart, open_traces)


FLAGGED_LIMITS = (50, 200, 1000)  # rows the flagged-traces panel offers to show


def flagged_traces(
    con: duckdb.DuckDBPyConnection, include_resolved: bool, limit: int = FLAGGED_LIMITS[0]
) -> list[dict[str, Any]]:
    return rows(
        con,
        "flagged_traces",
        include_resolved="true" if include_resolved else None,
        limit_rows=str(limit),
    )


@dataclass
class SpanNode:
    span: dict[str, Any]
    depth: int
    findings: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class TraceDetail:
    trace_id: str
    trace: dict[str, Any] | None
    findings: list[dict[str, Any]]
    tree: list[SpanNode]
    audit: list[dict[str, Any]]
    resolutions: list[dict[str, Any]]  # newest first
    open_detectors: list[str] = field(default_factory=list)
    resolved: bool = False
    spans_total: int = 0  # the trace's spans; `tree` shows at most TREE_ROWS and the flagged
    halt: StoredHalt | None = None  # the halt in force on the trace's conversation

    @property
    def latest_resolution(self) -> dict[str, Any] | None:
        """The newest resolution still in force: a later reopening of its scope (the trace,
        or its detector) takes it out, and an older one of another scope may stand."""
        seen: set[str | None] = set()
        for row in self.resolutions:  # newest first
            if row["detector"] in seen:
                continue
            seen.add(row["detector"])
            if row["resolved"]:
                return row
        return None


def trace_detail(con: duckdb.DuckDBPyConnection, trace_id: str) -> TraceDetail:
    """One trace: its findings with their evidence, its spans as a tree, the guard's
    decisions on it and its resolution history."""
    trace = _dicts(
        con,
        "SELECT trace_id, escalation_level, escalation_rank, detectors_fired, agent_names, "
        "requester, conversation_id, service_name, span_count, release_reason, error, "
        "trace_start FROM traces WHERE trace_id = ? ORDER BY trace_start",
        [trace_id],
    )
    findings = _dicts(
        con,
        "SELECT span_id, detector, round(score, 3) AS score, threshold, detected, "
        "escalation_level, escalation_rank, risk_category, explanation, evidence, "
        "evaluated_at FROM findings WHERE trace_id = ? "
        "ORDER BY detected DESC, escalation_rank DESC, score DESC, detector",
        [trace_id],
    )
    for finding in findings:
        finding["evidence"] = _evidence(finding["evidence"])
    spans = _dicts(
        con,
        "SELECT span_id, parent_span_id, name, kind, start_time, duration_ms, status_code, "
        "operation, agent_name, tool_name, escalation_level FROM spans WHERE trace_id = ? "
        "ORDER BY start_time, span_id",
        [trace_id],
    )
    audit = _dicts(
        con,
        "SELECT date_trunc('second', decided_at) AS decided_at, verdict, risk, tool, "
        "requester, source, approval, reasons ->> '$[0]' AS reason, span_id FROM audit "
        "WHERE trace_id = ? ORDER BY decided_at",
        [trace_id],
    )
    history = _dicts(
        con,
        "SELECT resolved_at, detector, resolved, resolved_by, resolution_notes "
        "FROM resolutions WHERE trace_id = ? ORDER BY resolved_at DESC, resolved DESC",
        [trace_id],
    )
    trace = [_whole_trace(trace)] if trace else []
    fired = [f for f in findings if f["detected"]]
    open_detectors, resolved = open_alerts(fired, history)
    conversation = trace[0]["conversation_id"] if trace else None
    return TraceDetail(
        halt=_halt_in_force(con, conversation) if conversation else None,
        trace_id=trace_id,
        trace=trace[0] if trace else None,
        findings=fired,
        tree=_shown_rows(span_tree(spans, fired)),
        spans_total=len(spans),
        audit=audit,
        resolutions=history,
        open_detectors=open_detectors,
        resolved=resolved,
    )


def _whole_trace(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """A trace's rows as one: a trace has a row per local root (a part another service sent
    under a remote parent, say), and the page's header showed the first row's level and
    spans beside findings of the others."""
    first = dict(rows[0])
    strictest = max(rows, key=lambda row: row["escalation_rank"])
    first["escalation_level"] = strictest["escalation_level"]
    first["escalation_rank"] = strictest["escalation_rank"]
    first["span_count"] = sum(row["span_count"] or 0 for row in rows)
    names = {
        key: [n for row in rows for n in _json_list(row[key])]
        for key in ("agent_names", "detectors_fired")
    }
    first["agent_names"] = list(dict.fromkeys(names["agent_names"]))
    first["detectors_fired"] = sorted(set(names["detectors_fired"]))
    return first


def _halt_in_force(con: duckdb.DuckDBPyConnection, conversation: str) -> StoredHalt | None:
    """The conversation's halt, if one is in force (a store no halt was ever set in has no
    halts table)."""
    tables = {row[0] for row in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
    if "halts" not in tables:
        return None
    found = select_halts(
        con, f"FROM ({IN_FORCE}) WHERE halted AND conversation = ?", [conversation]
    )
    return found[0] if found else None


def open_alerts(
    fired: list[dict[str, Any]], history: list[dict[str, Any]]
) -> tuple[list[str], bool]:
    """The fired detectors no resolution in force covers, and whether the trace is resolved
    (the rule of the `flagged_traces` query: the latest row per detector, NULL = all; a
    resolution covers the findings judged by the time it was made, not those that came
    after it)."""
    in_force: dict[str | None, dict[str, Any]] = {}
    for row in history:  # newest first
        in_force.setdefault(row["detector"], row)

    def covered(finding: dict[str, Any], resolution: dict[str, Any] | None) -> bool:
        if resolution is None or not resolution["resolved"]:
            return False
        judged = finding.get("evaluated_at")
        return judged is None or judged <= resolution["resolved_at"]

    still_open = sorted(
        {
            f["detector"]
            for f in fired
            if not covered(f, in_force.get(None)) and not covered(f, in_force.get(f["detector"]))
        }
    )
    whole = in_force.get(None)
    if not fired:
        return [], bool(whole and whole["resolved"])
    return still_open, not still_open


# Rows of a trace's span tree a page shows: a trace of 30,000 spans made an 8.5 MB page
# that took a browser 15 s to draw.
TREE_ROWS = 2_000


def _shown_rows(tree: list[SpanNode]) -> list[SpanNode]:
    """The first TREE_ROWS rows of the tree, and every flagged span after them."""
    return tree[:TREE_ROWS] + [node for node in tree[TREE_ROWS:] if node.findings]


def span_tree(spans: list[dict[str, Any]], findings: list[dict[str, Any]]) -> list[SpanNode]:
    """Spans in depth-first order with their depth. A span whose parent is not in the store
    (a trace cut by the buffer, a remote parent) is shown as a root, and so is a span caught
    in a parent cycle (hostile input): every span is shown once."""
    known = {s["span_id"] for s in spans}
    children: dict[str | None, list[dict[str, Any]]] = {}
    for span in spans:
        parent = span["parent_span_id"] if span["parent_span_id"] in known else None
        children.setdefault(parent, []).append(span)
    by_span: dict[str, list[dict[str, Any]]] = {}
    for finding in findings:
        by_span.setdefault(finding["span_id"], []).append(finding)
    ordered: list[SpanNode] = []
    seen: set[str] = set()
    roots = children.get(None, [])
    for root in [*roots, *spans]:  # then whatever no root led to
        if root["span_id"] in seen:
            continue
        stack = [(root, 0)]
        while stack:
            span, depth = stack.pop()
            if span["span_id"] in seen:
                continue
            seen.add(span["span_id"])
            ordered.append(SpanNode(span, depth, by_span.get(span["span_id"], [])))
            stack.extend(
                (child, depth + 1) for child in reversed(children.get(span["span_id"], []))
            )
    return ordered


def audit_log(
    con: duckdb.DuckDBPyConnection,
    requester: str | None,
    tool: str | None,
    verdict: str | None,
    limit: int = 30,
) -> dict[str, Any]:
    return {
        "rows": rows(
            con,
            "audit",
            requester=requester,
            tool=tool,
            verdict=verdict,
            limit_rows=str(limit),
        ),
        "by_requester": rows(con, "audit_by", per="requester", limit_rows="20"),
        "by_tool": rows(con, "audit_by", per="tool", limit_rows="20"),
    }


def audit_choices(con: duckdb.DuckDBPyConnection) -> dict[str, list[str]]:
    """The requesters and tools the audit filter offers (as of the page's loading)."""
    return {
        "requesters": _column(con, "SELECT DISTINCT requester FROM audit WHERE requester "
                              "IS NOT NULL ORDER BY 1 LIMIT 500"),
        "tools": _column(con, "SELECT DISTINCT tool FROM audit WHERE tool IS NOT NULL "
                         "ORDER BY 1 LIMIT 500"),
    }  # fmt: skip


def behaviour(con: duckdb.DuckDBPyConnection, limit: int = 50) -> list[dict[str, Any]]:
    return rows(con, "behavior_indicators", limit_rows=str(limit))


def _dicts(con: duckdb.DuckDBPyConnection, sql: str, params: list[Any]) -> list[dict[str, Any]]:
    result = con.execute(sql, params)
    names = [d[0] for d in result.description]
    return [dict(zip(names, row, strict=True)) for row in result.fetchall()]


def _column(con: duckdb.DuckDBPyConnection, sql: str) -> list[str]:
    return [str(row[0]) for row in con.execute(sql).fetchall()]


def _json_list(value: Any) -> list[str]:
    try:
        parsed = json.loads(value) if isinstance(value, str) else value
    except ValueError:
        return [str(value)]
    return [str(v) for v in parsed] if isinstance(parsed, list) else []


def _evidence(value: Any) -> list[dict[str, Any]]:
    """The finding's evidence as a list of {text, ...}; whatever the store holds, shown."""
    if value is None:
        return []
    try:
        parsed = json.loads(value) if isinstance(value, str) else value
    except ValueError:
        return [{"text": str(value)}]
    if isinstance(parsed, dict):
        parsed = [parsed]
    if not isinstance(parsed, list):
        return [{"text": str(parsed)}]
    return [item if isinstance(item, dict) else {"text": str(item)} for item in parsed]
