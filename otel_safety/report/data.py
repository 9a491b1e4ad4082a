"""What the report shows, read from the store with the SQL kit's own queries."""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb

from otel_safety import queries
from otel_safety.calibration.data import data_digest, load_labelled
from otel_safety.calibration.file import CalibrationError, load_calibration
from otel_safety.exporters.duckdb import open_store
from otel_safety.model import EscalationLevel

LEVELS = [level.name for level in EscalationLevel]


@dataclass
class SweepCurve:
    """One detector's precision/recall at each threshold, on one kind of label."""

    detector: str
    kind: str
    points: list[dict[str, Any]]  # threshold, precision, recall, f1, best, tp, fp, fn, tn
    store_threshold: float | None
    positives: int
    traces: int

    @property
    def best(self) -> dict[str, Any] | None:
        return next((p for p in self.points if p["best"]), None)

    def at(self, threshold: float | None) -> dict[str, Any] | None:
        """The point a detector with this threshold sits on (the lowest score >= it)."""
        if threshold is None:
            return None
        reached = [p for p in self.points if p["threshold"] >= threshold]
        return min(reached, key=lambda p: p["threshold"]) if reached else None


@dataclass
class CalibrationStatus:
    path: str
    document: dict[str, Any] | None = None
    error: str | None = None
    same_data: bool | None = None  # calibrated on exactly this store's labels


@dataclass
class ReportData:
    db_path: str
    generated_at: str
    totals: dict[str, int]
    flagged_columns: list[str]
    flagged_rows: list[tuple[Any, ...]]
    flagged_limit: int
    bucket: str
    timeline: list[tuple[datetime, dict[str, int]]]
    curves: list[SweepCurve]
    confusion: list[dict[str, Any]]
    store_thresholds: dict[str, float]
    calibration: CalibrationStatus | None = None
    label_counts: dict[str, dict[str, int]] = field(default_factory=dict)


def gather(
    db_path: str | Path, calibration: str | Path | None = None, limit: int = 200
) -> ReportData:
    with open_store(db_path) as con:
        totals = store_totals(con)
        columns, rows = _kit(con, "flagged_spans", limit_rows=str(limit))  # open alerts
        bucket, series = timeline(con)
        curves = _curves(con)
        confusion_columns, confusion_rows = _kit(con, "confusion_matrix")
        confusion = [dict(zip(confusion_columns, r, strict=True)) for r in confusion_rows]
        store_thresholds = dict(
            con.execute("SELECT detector, mode(threshold) FROM findings GROUP BY 1").fetchall()
        )
        status = _calibration(con, calibration) if calibration else None
    label_counts: dict[str, dict[str, int]] = defaultdict(dict)
    for row in confusion:
        label_counts[row["detector"]][row["labels"]] = row["traces"]
    return ReportData(
        db_path=str(db_path),
        generated_at=datetime.now(UTC).isoformat(timespec="seconds"),
        totals=totals,
        flagged_columns=columns,
        flagged_rows=rows,
        flagged_limit=limit,
        bucket=bucket,
        timeline=series,
        curves=curves,
        confusion=confusion,
        store_thresholds=store_thresholds,
        calibration=status,
        label_counts=dict(label_counts),
    )


def _kit(con: duckdb.DuckDBPyConnection, name: str, **params: str):
    return queries.run(con, queries.resolve_sql(name), params)


def store_totals(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """The headline counts of a store (the report's and the dashboard's)."""
    open_alerts, resolved_alerts = con.execute(ALERTS_SQL).fetchone()
    return {
        "traces": _scalar(con, "SELECT count(*) FROM traces"),
        "escalated traces": _scalar(con, "SELECT count(*) FROM traces WHERE escalation_rank >= 1"),
        "spans": _scalar(con, "SELECT count(*) FROM spans"),
        "findings": _scalar(con, "SELECT count(*) FROM findings"),
        "fired findings": _scalar(con, "SELECT count(*) FROM findings WHERE detected"),
        "open alerts": open_alerts,
        "resolved alerts": resolved_alerts,
        "labels": _scalar(con, "SELECT count(*) FROM labels"),
    }


# Alerts as `flagged_spans` lists them (a fired finding at WARN or above), open or resolved by
# the resolution in force (the latest per trace and detector; no detector: the whole trace)
# when judged by the time it was made, as that query file decides it.
ALERTS_SQL = """
WITH resolved AS (
    SELECT trace_id, detector, resolved_at FROM resolutions
    QUALIFY row_number() OVER (
        PARTITION BY trace_id, detector ORDER BY resolved_at DESC, resolved DESC) = 1
        AND resolved
), alerts AS (
    SELECT EXISTS (
        SELECT 1 FROM resolved AS r
        WHERE r.trace_id = f.trace_id AND (r.detector IS NULL OR r.detector = f.detector)
          AND coalesce(f.evaluated_at <= r.resolved_at, TRUE)
    ) AS is_resolved
    FROM findings AS f WHERE f.detected AND f.escalation_rank >= 1
)
SELECT count(*) FILTER (NOT is_resolved), count(*) FILTER (is_resolved) FROM alerts
"""


def _scalar(con: duckdb.DuckDBPyConnection, sql: str) -> int:
    return int(con.execute(sql).fetchone()[0])


def timeline(con: duckdb.DuckDBPyConnection) -> tuple[str, list[tuple[datetime, dict[str, int]]]]:
    """Traces per escalation level per time bucket. The bucket fits the time most traces
    cover (the middle 80%): one span from a clock left at 1970 must not turn a day's
    minutes into one bar (the bars stand side by side, so it only adds a bar of its own)."""
    first, last = con.execute(
        "SELECT quantile_disc(trace_start, 0.1), quantile_disc(trace_start, 0.9) FROM traces"
    ).fetchone()
    if first is None:
        return "day", []
    covered = (last - first).total_seconds()
    bucket = "minute" if covered <= 3 * 3600 else "hour" if covered <= 3 * 86400 else "day"
    rows = con.execute(
        f"SELECT date_trunc('{bucket}', trace_start) AS t, escalation_level, count(*) "
        "FROM traces WHERE trace_start IS NOT NULL GROUP BY ALL ORDER BY 1"
    ).fetchall()
    series: dict[datetime, dict[str, int]] = {}
    for moment, level, n in rows:
        series.setdefault(moment, dict.fromkeys(LEVELS, 0))[level or "NONE"] += n
    return bucket, sorted(series.items())


def _curves(con: duckdb.DuckDBPyConnection) -> list[SweepCurve]:
    columns, rows = _kit(con, "threshold_sweep")
    grouped: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    stored: dict[str, float | None] = {}
    for row in rows:
        point = dict(zip(columns, row, strict=True))
        grouped[(point["detector"], point["labels"])].append(point)
        stored[point["detector"]] = point["store_threshold"]
    curves = []
    for (detector, kind), points in sorted(grouped.items()):
        first = points[0]
        positives = first["tp"] + first["fn"]
        traces = positives + first["fp"] + first["tn"]
        curves.append(SweepCurve(detector, kind, points, stored[detector], positives, traces))
    return curves


def _calibration(con: duckdb.DuckDBPyConnection, path: str | Path) -> CalibrationStatus:
    status = CalibrationStatus(str(path))
    try:
        load_calibration(path)  # the same checks the detectors apply at start
        status.document = json.loads(Path(path).read_text(encoding="utf-8"))
    except CalibrationError as exc:
        status.error = str(exc)
        return status
    recorded = (status.document.get("provenance") or {}).get("data_sha256")
    if recorded:
        status.same_data = recorded == data_digest(load_labelled(con))
    return status
