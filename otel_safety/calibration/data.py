"""The rows calibration learns from: one per labelled (trace, detector), with its score.

A label is about a whole trace; a detector writes one finding per evaluation of the trace,
so the trace's score is the highest it got. A labelled trace the detector judged without a
finding (nothing to judge) scores 0 and so never fires, as in the live pipeline. A label on
a trace the store never judged has nothing to calibrate against and is counted apart.
"""

from __future__ import annotations

import hashlib
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

import duckdb

from otel_safety.labels import is_synthetic
from otel_safety.sql_helpers import EFFECTIVE_LABELS_SQL

LABELLED_SQL = f"""
WITH effective AS ({EFFECTIVE_LABELS_SQL}),
scores AS (SELECT trace_id, detector, max(score) AS score FROM findings GROUP BY ALL),
judged AS (SELECT DISTINCT trace_id FROM traces UNION SELECT DISTINCT trace_id FROM findings)
SELECT e.detector, e.trace_id, e.label, coalesce(s.score, 0.0) AS score, e.source,
       j.trace_id IS NOT NULL AS judged
FROM effective AS e
LEFT JOIN scores AS s USING (trace_id, detector)
LEFT JOIN judged AS j USING (trace_id)
ORDER BY e.detector, e.trace_id
"""


@dataclass(frozen=True)
class Labelled:
    """One labelled trace for one detector."""

    trace_id: str
    label: bool
    score: float
    source: str

    @property
    def synthetic(self) -> bool:
        return is_synthetic(self.source)


@dataclass
class LabelledData:
    rows: dict[str, list[Labelled]]  # detector -> rows, ordered by trace id
    unjudged: Counter[str]  # detector -> labels whose trace the store never judged

    def detectors(self) -> list[str]:
        return sorted(self.rows)


def load_labelled(con: duckdb.DuckDBPyConnection) -> LabelledData:
    rows: dict[str, list[Labelled]] = defaultdict(list)
    unjudged: Counter[str] = Counter()
    for detector, trace_id, label, score, source, judged in con.execute(LABELLED_SQL).fetchall():
        if not judged:
            unjudged[detector] += 1
            continue
        rows[detector].append(Labelled(trace_id, bool(label), float(score), source or ""))
    return LabelledData(dict(rows), unjudged)


def provenance(con: duckdb.DuckDBPyConnection, path: str | Path, data: LabelledData) -> dict:
    """Where the figures came from: the store (path, hash, row counts) and the labels."""
    counts = {
        table: con.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
        for table in ("spans", "findings", "traces", "labels")
    }
    sources: Counter[str] = Counter(row.source for rows in data.rows.values() for row in rows)
    return {
        "store": str(Path(path).resolve()),
        "store_sha256": file_sha256(path),
        "rows": counts,
        "labels_in_force_by_source": dict(sorted(sources.items())),
        "labels_without_judged_trace": dict(sorted(data.unjudged.items())),
        "data_sha256": data_digest(data),
    }


def file_sha256(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def data_digest(data: LabelledData) -> str:
    """A hash of exactly what was calibrated on (detector, trace, label, score, source):
    the same on any copy of the data, unlike the file's hash."""
    digest = hashlib.sha256()
    for detector in data.detectors():
        for row in data.rows[detector]:
            digest.update(
                f"{detector}\t{row.trace_id}\t{int(row.label)}\t{row.score!r}\t{row.source}\n".encode()
            )
    return digest.hexdigest()
