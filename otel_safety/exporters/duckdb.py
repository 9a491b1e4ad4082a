"""The DuckDB store: spans, findings, traces and labels in one file, for SQL and calibration.

Rows are inserted column-wise in one statement per table and batch (`unnest` over
parameter lists), never row by row. The schema is created on first use and versioned in
`otel_safety_meta`.
"""

from __future__ import annotations

import base64
import json
import logging
import threading
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
from opentelemetry.sdk.trace import ReadableSpan

from otel_safety import semconv as sc
from otel_safety.mapping import span_id_hex, trace_id_hex
from otel_safety.pipeline import TraceEvaluation

logger = logging.getLogger(__name__)

SCHEMA_VERSION = 1

SCHEMA = """
CREATE TABLE IF NOT EXISTS otel_safety_meta (key VARCHAR PRIMARY KEY, value VARCHAR);
CREATE TABLE IF NOT EXISTS spans (
    trace_id VARCHAR NOT NULL,
    span_id VARCHAR NOT NULL,
    parent_span_id VARCHAR,
    name VARCHAR,
    kind VARCHAR,
    start_time TIMESTAMP,
    end_time TIMESTAMP,
    duration_ms DOUBLE,
    status_code VARCHAR,
    status_message VARCHAR,
    service_name VARCHAR,
    scope_name VARCHAR,
    dialect VARCHAR,
    operation VARCHAR,
    agent_name VARCHAR,
    tool_name VARCHAR,
    conversation_id VARCHAR,
    requester VARCHAR,
    escalation_level VARCHAR,
    escalation_rank TINYINT,
    trace_escalation_level VARCHAR,
    trace_escalation_rank TINYINT,
    notes JSON,
    attributes JSON,
    events JSON,
    resource JSON,
    inserted_at TIMESTAMP
);
CREATE TABLE IF NOT EXISTS findings (
    trace_id VARCHAR NOT NULL,
    span_id VARCHAR,
    detector VARCHAR NOT NULL,
    score DOUBLE NOT NULL,
    threshold DOUBLE,
    detected BOOLEAN NOT NULL,
    severity VARCHAR,
    escalation_level VARCHAR,
    escalation_rank TINYINT,
    risk_category VARCHAR,
    explanation VARCHAR,
    evidence JSON,
    service_name VARCHAR,
    agent_name VARCHAR,
    conversation_id VARCHAR,
    requester VARCHAR,
    trace_start TIMESTAMP,
    evaluated_at TIMESTAMP
);
CREATE TABLE IF NOT EXISTS traces (
    trace_id VARCHAR NOT NULL,
    root_span_id VARCHAR,
    service_name VARCHAR,
    agent_names JSON,
    conversation_id VARCHAR,
    requester VARCHAR,
    escalation_level VARCHAR,
    escalation_rank TINYINT,
    detectors_fired JSON,
    release_reason VARCHAR,
    span_count INTEGER,
    error VARCHAR,
    trajectory JSON,
    trace_start TIMESTAMP,
    evaluated_at TIMESTAMP
);
CREATE TABLE IF NOT EXISTS labels (
    trace_id VARCHAR NOT NULL,
    span_id VARCHAR,
    detector VARCHAR NOT NULL,
    label BOOLEAN NOT NULL,
    source VARCHAR,
    note VARCHAR,
    created_at TIMESTAMP DEFAULT current_timestamp
);
"""

SPAN_COLUMNS = {
    "trace_id": "VARCHAR",
    "span_id": "VARCHAR",
    "parent_span_id": "VARCHAR",
    "name": "VARCHAR",
    "kind": "VARCHAR",
    "start_time": "TIMESTAMP",
    "end_time": "TIMESTAMP",
    "duration_ms": "DOUBLE",
    "status_code": "VARCHAR",
    "status_message": "VARCHAR",
    "service_name": "VARCHAR",
    "scope_name": "VARCHAR",
    "dialect": "VARCHAR",
    "operation": "VARCHAR",
    "agent_name": "VARCHAR",
    "tool_name": "VARCHAR",
    "conversation_id": "VARCHAR",
    "requester": "VARCHAR",
    "escalation_level": "VARCHAR",
    "escalation_rank": "TINYINT",
    "trace_escalation_level": "VARCHAR",
    "trace_escalation_rank": "TINYINT",
    "notes": "JSON",
    "attributes": "JSON",
    "events": "JSON",
    "resource": "JSON",
    "inserted_at": "TIMESTAMP",
}
FINDING_COLUMNS = {
    "trace_id": "VARCHAR",
    "span_id": "VARCHAR",
    "detector": "VARCHAR",
    "score": "DOUBLE",
    "threshold": "DOUBLE",
    "detected": "BOOLEAN",
    "severity": "VARCHAR",
    "escalation_level": "VARCHAR",
    "escalation_rank": "TINYINT",
    "risk_category": "VARCHAR",
    "explanation": "VARCHAR",
    "evidence": "JSON",
    "service_name": "VARCHAR",
    "agent_name": "VARCHAR",
    "conversation_id": "VARCHAR",
    "requester": "VARCHAR",
    "trace_start": "TIMESTAMP",
    "evaluated_at": "TIMESTAMP",
}
TRACE_COLUMNS = {
    "trace_id": "VARCHAR",
    "root_span_id": "VARCHAR",
    "service_name": "VARCHAR",
    "agent_names": "JSON",
    "conversation_id": "VARCHAR",
    "requester": "VARCHAR",
    "escalation_level": "VARCHAR",
    "escalation_rank": "TINYINT",
    "detectors_fired": "JSON",
    "release_reason": "VARCHAR",
    "span_count": "INTEGER",
    "error": "VARCHAR",
    "trajectory": "JSON",
    "trace_start": "TIMESTAMP",
    "evaluated_at": "TIMESTAMP",
}


class StoreError(RuntimeError):
    """The store file cannot be used (locked, newer schema, not a DuckDB file)."""


class DuckDBStore:
    """A sink writing evaluated traces to a DuckDB file (or `:memory:`)."""

    def __init__(self, path: str | Path = "otel-safety.duckdb") -> None:
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).expanduser().parent.mkdir(parents=True, exist_ok=True)
        try:
            self._con = duckdb.connect(self.path)
        except duckdb.Error as exc:
            raise StoreError(f"cannot open DuckDB store {self.path}: {exc}") from exc
        self._lock = threading.Lock()
        ensure_schema(self._con, self.path)

    @property
    def connection(self) -> duckdb.DuckDBPyConnection:
        return self._con

    def write(self, evaluations: Sequence[TraceEvaluation]) -> None:
        if not evaluations:
            return
        with self._lock:
            try:
                self._insert(evaluations)
            except duckdb.Error:
                # One bad trace must not cost the others: retry trace by trace.
                logger.exception("otel-safety store batch failed; retrying trace by trace")
                for evaluation in evaluations:
                    try:
                        self._insert([evaluation])
                    except duckdb.Error:
                        logger.exception("otel-safety store rejected trace %s", evaluation.trace_id)

    def _insert(self, evaluations: Sequence[TraceEvaluation]) -> None:
        now = datetime.now(UTC).replace(tzinfo=None)
        spans, findings, traces = [], [], []
        for evaluation in evaluations:
            spans.extend(span_row(evaluation, span, now) for span in evaluation.spans)
            findings.extend(finding_rows(evaluation, now))
            if evaluation.trajectory is not None or evaluation.error:
                traces.append(trace_row(evaluation, now))
        self._con.execute("BEGIN TRANSACTION")
        try:
            insert_rows(self._con, "spans", SPAN_COLUMNS, spans)
            insert_rows(self._con, "findings", FINDING_COLUMNS, findings)
            insert_rows(self._con, "traces", TRACE_COLUMNS, traces)
            self._con.execute("COMMIT")
        except Exception:
            self._con.execute("ROLLBACK")
            raise

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        with self._lock:
            self._con.execute("CHECKPOINT")
        return True

    def shutdown(self) -> None:
        with self._lock:
            self._con.close()


def ensure_schema(con: duckdb.DuckDBPyConnection, where: str) -> None:
    """Create the tables on first use; refuse a store written by a newer version."""
    try:
        con.execute(SCHEMA)
    except duckdb.Error as exc:
        raise StoreError(f"cannot create the otel-safety schema in {where}: {exc}") from exc
    row = con.execute("SELECT value FROM otel_safety_meta WHERE key = 'schema_version'").fetchone()
    if row is None:
        con.execute(
            "INSERT INTO otel_safety_meta VALUES ('schema_version', ?)", [str(SCHEMA_VERSION)]
        )
    elif int(row[0]) > SCHEMA_VERSION:
        raise StoreError(
            f"{where} has schema version {row[0]}, newer than this otel-safety "
            f"({SCHEMA_VERSION}); upgrade otel-safety to use it"
        )


def insert_rows(
    con: duckdb.DuckDBPyConnection, table: str, columns: dict[str, str], rows: list[dict]
) -> None:
    if not rows:
        return
    names = list(columns)
    selects = ", ".join(f"unnest(${name})::{columns[name]}" for name in names)
    params = {name: [row.get(name) for row in rows] for name in names}
    con.execute(f"INSERT INTO {table} ({', '.join(names)}) SELECT {selects}", params)


def span_row(evaluation: TraceEvaluation, span: ReadableSpan, now: datetime) -> dict[str, Any]:
    attributes = dict(span.attributes or {})
    trajectory = evaluation.trajectory
    start, end = span.start_time or 0, span.end_time or 0
    return {
        "trace_id": trace_id_hex(span.context.trace_id),
        "span_id": span_id_hex(span.context.span_id),
        "parent_span_id": span_id_hex(span.parent.span_id) if span.parent else None,
        "name": clean(span.name),
        "kind": span.kind.name,
        "start_time": timestamp(start),
        "end_time": timestamp(end),
        "duration_ms": (end - start) / 1e6 if start and end else None,
        "status_code": span.status.status_code.name,
        "status_message": clean(span.status.description),
        "service_name": clean(_resource_attr(span, "service.name")),
        "scope_name": span.instrumentation_scope.name if span.instrumentation_scope else None,
        "dialect": attributes.get(sc.OTEL_SAFETY_MAPPING_DIALECT),
        "operation": clean(
            attributes.get("gen_ai.operation.name") or attributes.get("openinference.span.kind")
        ),
        "agent_name": clean(
            attributes.get("gen_ai.agent.name")
            or attributes.get("agent.name")
            or (trajectory.agent_names[0] if trajectory and trajectory.agent_names else None)
        ),
        "tool_name": clean(attributes.get("gen_ai.tool.name") or attributes.get("tool.name")),
        "conversation_id": trajectory.conversation_id if trajectory else None,
        "requester": trajectory.requester.id if trajectory and trajectory.requester else None,
        "escalation_level": attributes.get(sc.OTEL_SAFETY_ESCALATION_LEVEL),
        "escalation_rank": attributes.get(sc.OTEL_SAFETY_ESCALATION_RANK),
        "trace_escalation_level": evaluation.level.name if trajectory else None,
        "trace_escalation_rank": int(evaluation.level) if trajectory else None,
        "notes": to_json(attributes.get(sc.OTEL_SAFETY_NOTES)),
        "attributes": to_json(attributes),
        "events": to_json(
            [
                {"name": e.name, "timestamp": e.timestamp, "attributes": dict(e.attributes or {})}
                for e in span.events
            ]
        ),
        "resource": to_json(dict(span.resource.attributes) if span.resource else {}),
        "inserted_at": now,
    }


def finding_rows(evaluation: TraceEvaluation, now: datetime) -> list[dict[str, Any]]:
    trajectory = evaluation.trajectory
    start = _trace_start(evaluation)
    return [
        {
            "trace_id": f.trace_id,
            "span_id": f.span_id,
            "detector": f.detector,
            "score": f.score,
            "threshold": f.threshold,
            "detected": f.detected,
            "severity": f.severity.value,
            "escalation_level": f.escalation.name,
            "escalation_rank": int(f.escalation),
            "risk_category": f.risk_category,
            "explanation": clean(f.explanation),
            "evidence": to_json([e.model_dump() for e in f.evidence]),
            "service_name": trajectory.service_name if trajectory else None,
            "agent_name": trajectory.agent_names[0]
            if trajectory and trajectory.agent_names
            else None,
            "conversation_id": trajectory.conversation_id if trajectory else None,
            "requester": trajectory.requester.id if trajectory and trajectory.requester else None,
            "trace_start": start,
            "evaluated_at": now,
        }
        for f in evaluation.findings
    ]


def trace_row(evaluation: TraceEvaluation, now: datetime) -> dict[str, Any]:
    trajectory = evaluation.trajectory
    return {
        "trace_id": evaluation.trace_id,
        "root_span_id": trajectory.root_span_id if trajectory else None,
        "service_name": trajectory.service_name if trajectory else None,
        "agent_names": to_json(trajectory.agent_names if trajectory else []),
        "conversation_id": trajectory.conversation_id if trajectory else None,
        "requester": trajectory.requester.id if trajectory and trajectory.requester else None,
        "escalation_level": evaluation.level.name,
        "escalation_rank": int(evaluation.level),
        "detectors_fired": to_json(sorted({f.detector for f in evaluation.findings if f.detected})),
        "release_reason": evaluation.reason,
        "span_count": len(evaluation.spans),
        "error": evaluation.error,
        "trajectory": clean(trajectory.model_dump_json()) if trajectory else None,
        "trace_start": _trace_start(evaluation),
        "evaluated_at": now,
    }


def timestamp(unix_nanos: int) -> datetime | None:
    if not unix_nanos:
        return None
    return datetime.fromtimestamp(unix_nanos / 1e9, UTC).replace(tzinfo=None)


def clean(value: Any) -> str | None:
    """Text DuckDB will accept: lone surrogates and other unencodable bytes replaced."""
    if value is None:
        return None
    return str(value).encode("utf-8", errors="replace").decode("utf-8")


def to_json(value: Any) -> str | None:
    if value is None:
        return None
    return clean(json.dumps(value, default=_json_default, ensure_ascii=False))


def _json_default(value: Any) -> Any:
    if isinstance(value, tuple | set | frozenset):
        return list(value)
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    return str(value)


def _resource_attr(span: ReadableSpan, key: str) -> Any:
    return span.resource.attributes.get(key) if span.resource else None


def _trace_start(evaluation: TraceEvaluation) -> datetime | None:
    starts = [s.start_time for s in evaluation.spans if s.start_time]
    return timestamp(min(starts)) if starts else None
