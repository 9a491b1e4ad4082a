"""Record that a trace's alerts (or one detector's) were dealt with, or reopen them.

The `resolutions` table is a history like `labels`: nothing is overwritten, the latest row
per (trace, detector) is in force, and a NULL detector stands for every alert of the trace.
The named queries that list alerts (`flagged_traces`, `flagged_spans`) leave resolved ones
out unless asked with `include_resolved=true`.
"""

from __future__ import annotations

import getpass
import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import duckdb

from otel_safety.exporters.duckdb import clean, ensure_schema, insert_rows, open_store
from otel_safety.exporters.schema import RESOLUTIONS

TRACE_ID = re.compile(r"^[0-9a-f]{32}$")
MAX_NOTE = 4000
MAX_NAME = 200


class ResolutionError(ValueError):
    """The resolution cannot be recorded; the message says why and what to do."""


@dataclass(frozen=True)
class Resolution:
    trace_id: str
    detector: str | None
    resolved: bool
    resolved_by: str
    resolved_at: datetime
    resolution_notes: str | None


def default_resolver() -> str:
    """The user running the command, for the audit trail when --by is not given."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


def resolve(
    db: str | Path,
    trace_id: str,
    *,
    by: str,
    note: str | None,
    detector: str | None = None,
    resolved: bool = True,
    wait: float | None = None,
) -> Resolution:
    """Append one resolution (or, with `resolved=False`, a reopening) and return it as stored.

    The trace must be in the store, and a detector must have fired on it: a typo would
    otherwise resolve nothing and say nothing."""
    trace_id = trace_id.strip().lower()
    if not TRACE_ID.match(trace_id):
        raise ResolutionError(f"a trace id is 32 hex digits, got {trace_id!r}")
    by = (by or "").strip()
    if not by:
        raise ResolutionError("say who resolves it (--by NAME)")
    if len(by) > MAX_NAME:
        raise ResolutionError(f"--by is at most {MAX_NAME} characters")
    if not (note or "").strip():
        raise ResolutionError("say what was found and done: a note is required")
    if len(note) > MAX_NOTE:
        raise ResolutionError(f"the note is at most {MAX_NOTE} characters, got {len(note)}")
    detector = (detector or "").strip() or None
    with open_store(db, read_only=False, wait=wait) as con:
        ensure_schema(con, str(db))
        known = con.execute(
            "SELECT (SELECT count(*) FROM traces WHERE trace_id = $t) "
            "+ (SELECT count(*) FROM findings WHERE trace_id = $t)",
            {"t": trace_id},
        ).fetchone()[0]
        if not known:
            raise ResolutionError(f"no trace {trace_id} in {db}; copy the id from `flagged_traces`")
        if detector is not None:
            fired = [
                row[0]
                for row in con.execute(
                    "SELECT DISTINCT detector FROM findings WHERE trace_id = ? AND detected "
                    "ORDER BY 1",
                    [trace_id],
                ).fetchall()
            ]
            if detector not in fired:
                raise ResolutionError(
                    f"detector {detector!r} did not fire on trace {trace_id}; "
                    f"those that did: {', '.join(fired) or 'none'}"
                )
        if not resolved:
            _check_reopening(con, trace_id, detector)
        con.execute("BEGIN TRANSACTION")
        insert_rows(
            con,
            RESOLUTIONS,
            [
                {
                    "trace_id": trace_id,
                    "detector": detector,
                    "resolved": resolved,
                    "resolved_by": clean(by),
                    "resolution_notes": clean(note) if note else None,
                }
            ],
        )
        row = con.execute(
            "SELECT resolved_at FROM resolutions WHERE trace_id = ? AND detector IS NOT DISTINCT "
            "FROM ? ORDER BY resolved_at DESC LIMIT 1",
            [trace_id, detector],
        ).fetchone()
        con.execute("COMMIT")
    return Resolution(trace_id, detector, resolved, by, row[0], note)


def _check_reopening(con: duckdb.DuckDBPyConnection, trace_id: str, detector: str | None) -> None:
    """A reopening must change what is open: refused, saying what to do instead, when the
    alert is not resolved, or when the whole trace's resolution covers the detector."""
    what = f"{detector} on trace {trace_id}" if detector else f"trace {trace_id}"
    if detector is not None and _in_force(con, trace_id, None):
        raise ResolutionError(
            f"trace {trace_id} is resolved as a whole, which covers {detector}; reopen the "
            f"trace (otel-safety resolve {trace_id} --reopen --note ...), then resolve the "
            "detectors that stay dealt with"
        )
    if not _in_force(con, trace_id, detector):
        resolved = [] if detector else _resolved_detectors(con, trace_id)
        hint = (
            f"; its resolved alert(s): {', '.join(resolved)} (reopen one with --detector "
            f"{resolved[0]})"
            if resolved
            else ""
        )
        raise ResolutionError(f"{what} is not resolved, so there is nothing to reopen{hint}")


def _resolved_detectors(con: duckdb.DuckDBPyConnection, trace_id: str) -> list[str]:
    """The detectors of a trace whose own resolution is in force."""
    named = con.execute(
        "SELECT DISTINCT detector FROM resolutions WHERE trace_id = ? AND detector IS NOT NULL "
        "ORDER BY detector",
        [trace_id],
    ).fetchall()
    return [name for (name,) in named if _in_force(con, trace_id, name)]


def _in_force(con: duckdb.DuckDBPyConnection, trace_id: str, detector: str | None) -> bool:
    """Whether the latest resolution of the trace (detector None) or of one detector says
    resolved."""
    latest = con.execute(
        "SELECT resolved FROM resolutions WHERE trace_id = ? AND detector IS NOT DISTINCT "
        "FROM ? ORDER BY resolved_at DESC LIMIT 1",
        [trace_id, detector],
    ).fetchone()
    return bool(latest and latest[0])
