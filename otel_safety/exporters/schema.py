"""The store's tables, defined once: the DDL and the column-wise inserts both come from here."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

SCHEMA_VERSION = 10  # 10: halts.source, halts.trace_id (halts the pipeline sets are stored)
# 9: audit.approval_id, audit.approval_by (who answered a warned call)
# 7: no primary keys on the trace tables (see Table.ddl)
# 6: the queries' shared macros and view (sql_helpers.py) kept in the store
# Columns added after a table was first released: (version, table, column). Stores of an
# older version get them with ALTER TABLE when opened; tables themselves are created as needed.
ADDED_COLUMNS: tuple[tuple[int, str, str], ...] = (
    (3, "findings", "details"),
    (3, "findings", "calibrated"),
    (4, "traces", "escalation_by_policy"),
    (8, "traces", "fragment"),
    (9, "audit", "approval_id"),
    (9, "audit", "approval_by"),
    (10, "halts", "source"),
    (10, "halts", "trace_id"),
)


@dataclass(frozen=True)
class Table:
    name: str
    columns: Mapping[str, str]  # column -> DuckDB type, in table order
    key: tuple[str, ...] = ()
    required: tuple[str, ...] = ()
    defaults: Mapping[str, str] = field(default_factory=dict)

    @property
    def written(self) -> dict[str, str]:
        """The columns a writer supplies (the rest take their default)."""
        return {name: kind for name, kind in self.columns.items() if name not in self.defaults}

    def ddl(self, primary_key: bool = False) -> str:
        """CREATE TABLE for DuckDB and DuckLake. The trace tables have no primary key: DuckDB
        rewrites a key's whole index at every checkpoint, so each write of a growing store
        cost more than the last (`bench/bench_store.py --grow`); writers replace rows by
        their `key` themselves (`insert_rows`)."""
        lines = []
        for name, kind in self.columns.items():
            line = f"    {name} {kind}"
            if name in self.required or name in self.key:
                line += " NOT NULL"
            if name in self.defaults:
                line += f" DEFAULT {self.defaults[name]}"
            lines.append(line)
        if self.key and primary_key:
            lines.append(f"    PRIMARY KEY ({', '.join(self.key)})")
        body = ",\n".join(lines)
        return f"CREATE TABLE IF NOT EXISTS {self.name} (\n{body}\n);"


def _columns(spec: str) -> dict[str, str]:
    """'name TYPE' per line -> {name: TYPE}."""
    return dict(line.split(maxsplit=1) for line in spec.strip().splitlines())


SPANS = Table(
    "spans",
    _columns("""
        trace_id VARCHAR
        span_id VARCHAR
        parent_span_id VARCHAR
        name VARCHAR
        kind VARCHAR
        start_time TIMESTAMP
        end_time TIMESTAMP
        duration_ms DOUBLE
        status_code VARCHAR
        status_message VARCHAR
        service_name VARCHAR
        scope_name VARCHAR
        dialect VARCHAR
        operation VARCHAR
        agent_name VARCHAR
        tool_name VARCHAR
        conversation_id VARCHAR
        requester VARCHAR
        escalation_level VARCHAR
        escalation_rank TINYINT
        trace_escalation_level VARCHAR
        trace_escalation_rank TINYINT
        notes JSON
        attributes JSON
        events JSON
        resource JSON
        inserted_at TIMESTAMP
    """),
    key=("trace_id", "span_id"),
)

FINDINGS = Table(
    "findings",
    _columns("""
        trace_id VARCHAR
        span_id VARCHAR
        detector VARCHAR
        score DOUBLE
        threshold DOUBLE
        detected BOOLEAN
        severity VARCHAR
        escalation_level VARCHAR
        escalation_rank TINYINT
        risk_category VARCHAR
        explanation VARCHAR
        evidence JSON
        service_name VARCHAR
        agent_name VARCHAR
        conversation_id VARCHAR
        requester VARCHAR
        trace_start TIMESTAMP
        evaluated_at TIMESTAMP
        details JSON
        calibrated BOOLEAN
    """),
    key=("trace_id", "span_id", "detector"),
    required=("score", "detected"),
)

TRACES = Table(
    "traces",
    _columns("""
        trace_id VARCHAR
        root_span_id VARCHAR
        service_name VARCHAR
        agent_names JSON
        conversation_id VARCHAR
        requester VARCHAR
        escalation_level VARCHAR
        escalation_rank TINYINT
        detectors_fired JSON
        release_reason VARCHAR
        span_count INTEGER
        error VARCHAR
        trajectory JSON
        trace_start TIMESTAMP
        evaluated_at TIMESTAMP
        escalation_by_policy BOOLEAN
        fragment BOOLEAN
    """),
    key=("trace_id", "root_span_id"),
)

LABELS = Table(
    "labels",
    _columns("""
        trace_id VARCHAR
        span_id VARCHAR
        detector VARCHAR
        label BOOLEAN
        source VARCHAR
        note VARCHAR
        created_at TIMESTAMP
    """),
    required=("trace_id", "detector", "label"),
    defaults={"created_at": "current_timestamp"},
)

AUDIT = Table(
    "audit",
    _columns("""
        decided_at TIMESTAMP
        trace_id VARCHAR
        span_id VARCHAR
        source VARCHAR
        tool VARCHAR
        category VARCHAR
        requester VARCHAR
        requester_role VARCHAR
        requester_trust TINYINT
        verdict VARCHAR
        risk TINYINT
        reasons JSON
        rule_ids JSON
        approval VARCHAR
        conversation_id VARCHAR
        service_name VARCHAR
        agent_name VARCHAR
        approval_id VARCHAR
        approval_by VARCHAR
    """),
    key=("trace_id", "span_id", "tool"),
    required=("verdict", "risk"),
)

RESOLUTIONS = Table(
    "resolutions",
    _columns("""
        trace_id VARCHAR
        detector VARCHAR
        resolved BOOLEAN
        resolved_by VARCHAR
        resolved_at TIMESTAMP
        resolution_notes VARCHAR
    """),
    required=("trace_id", "resolved"),
    defaults={"resolved_at": "current_timestamp"},
)
"""A history, like labels: the latest row per (trace, detector) is in force; detector NULL
stands for every alert of the trace. Reopening writes `resolved = false`."""

# Human approvals the guard asks for (otel_safety.approvals): one row per request, answered
# from the CLI, `serve`'s HTTP endpoint or the dashboard. Not part of TABLES: a DuckLake
# holds what was judged, not this live queue.
APPROVALS = Table(
    "approvals",
    _columns("""
        id VARCHAR
        seq BIGINT
        status VARCHAR
        created_at TIMESTAMP
        expires_at TIMESTAMP
        requester VARCHAR
        tool VARCHAR
        category VARCHAR
        risk INTEGER
        summary VARCHAR
        reasons JSON
        arguments VARCHAR
        fingerprint VARCHAR
        trace_id VARCHAR
        span_id VARCHAR
        conversation VARCHAR
        decided_by VARCHAR
        decided_at TIMESTAMP
        note VARCHAR
    """),
    key=("id",),
    required=("seq", "status", "created_at", "expires_at", "tool"),
)

# Conversations halted or lifted (otel_safety.approvals.halts): a history, like resolutions,
# whose latest row per conversation is in force. A person halts one (source "operator"), or
# the pipeline does for a trace that halts its conversation (source "trace", with the trace).
# Guards following the store refuse a halted conversation's tool calls. Not part of TABLES,
# as approvals are not.
HALTS = Table(
    "halts",
    _columns("""
        seq BIGINT
        conversation VARCHAR
        halted BOOLEAN
        decided_at TIMESTAMP
        decided_by VARCHAR
        reason VARCHAR
        source VARCHAR
        trace_id VARCHAR
    """),
    required=("seq", "conversation", "halted", "decided_at"),
)

DEEP_RUNS = Table(
    "deep_runs",
    _columns("""
        trace_id VARCHAR
        root_span_id VARCHAR
        requested_at TIMESTAMP
        chosen_because VARCHAR
        model VARCHAR
        prompt_version VARCHAR
        outcome VARCHAR
        error VARCHAR
        verdict VARCHAR
        score DOUBLE
        level_before VARCHAR
        level_after VARCHAR
        calls INTEGER
        prompt_tokens INTEGER
        completion_tokens INTEGER
        latency_ms DOUBLE
    """),
    required=("trace_id", "outcome"),
)

META_DDL = "CREATE TABLE IF NOT EXISTS otel_safety_meta (key VARCHAR PRIMARY KEY, value VARCHAR);"
TABLES = (SPANS, FINDINGS, TRACES, LABELS, AUDIT, DEEP_RUNS, RESOLUTIONS)
# Every table whose columns may grow: the trace tables and what processes say to each other.
EVOLVING = (*TABLES, APPROVALS, HALTS)
SCHEMA = "\n".join(
    [META_DDL, *(t.ddl() for t in TABLES), APPROVALS.ddl(primary_key=True), HALTS.ddl()]
)


def added_columns(table: Table, since: int) -> list[tuple[str, str]]:
    """(column, type) of `table` added after schema version `since`, in release order."""
    return [
        (column, table.columns[column])
        for version, name, column in ADDED_COLUMNS
        if name == table.name and version > since
    ]
