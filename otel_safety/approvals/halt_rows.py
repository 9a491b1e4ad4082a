"""The `halts` table's rows, read and written on a connection the caller holds.

Apart from `HaltStore` (which opens the file for a person's halt or lift) because the
store's writer records the halts the pipeline sets in the same transaction as the trace
that set them: a halt is as durable as the finding behind it, and is never written for a
trace the store did not keep.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Literal

import duckdb
from pydantic import BaseModel, ConfigDict

from otel_safety.halts import MAX_REASON, Halt

__all__ = [
    "COLUMNS",
    "IN_FORCE",
    "MAX_REASON",
    "StoredHalt",
    "clip_reason",
    "record_pipeline_halts",
    "select_halts",
    "write_halt",
]

COLUMNS = "seq, conversation, halted, decided_at, decided_by, reason, source, trace_id"
IN_FORCE = f"""
SELECT {COLUMNS} FROM halts
QUALIFY row_number() OVER (PARTITION BY conversation ORDER BY seq DESC) = 1
"""
PIPELINE = "otel-safety"  # who `decided_by` names for a halt the pipeline set


class StoredHalt(BaseModel):
    """One halt or lift, as the store keeps it."""

    model_config = ConfigDict(extra="forbid")

    seq: int
    conversation: str
    halted: bool
    decided_at: datetime
    decided_by: str | None = None
    reason: str | None = None
    # operator: a person (a store before schema 10 holds only these); trace: the pipeline,
    # judging `trace_id`; turn: the per-turn API
    source: Literal["operator", "trace", "turn"] = "operator"
    trace_id: str | None = None

    @property
    def by(self) -> str:
        """Who halted or lifted it, in a few words."""
        if self.source == "operator":
            return self.decided_by or ""
        trace = f" {self.trace_id}" if self.source == "trace" and self.trace_id else ""
        return f"{self.decided_by or PIPELINE}, {self.source}{trace}"


def select_halts(con: duckdb.DuckDBPyConnection, where: str, params: list) -> list[StoredHalt]:
    cursor = con.execute(f"SELECT {COLUMNS} {where}", params)
    names = [d[0] for d in cursor.description]
    halts = []
    for row in cursor.fetchall():
        fields = dict(zip(names, row, strict=True))
        fields["decided_at"] = fields["decided_at"].replace(tzinfo=UTC)
        fields["source"] = fields["source"] or "operator"
        halts.append(StoredHalt.model_validate(fields))
    return halts


def write_halt(
    con: duckdb.DuckDBPyConnection,
    conversation: str,
    halted: bool,
    by: str | None,
    reason: str,
    *,
    source: str = "operator",
    trace_id: str | None = None,
) -> StoredHalt:
    row = con.execute("SELECT coalesce(max(seq), 0) + 1 FROM halts").fetchone()
    seq = int(row[0]) if row else 1
    con.execute(
        f"INSERT INTO halts ({COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        [
            seq,
            conversation,
            halted,
            _now_naive(),
            (by or "").strip() or None,
            reason or None,
            source,
            trace_id,
        ],
    )
    return select_halts(con, "FROM halts WHERE seq = ?", [seq])[0]


def record_pipeline_halts(con: duckdb.DuckDBPyConnection, halts: Sequence[Halt]) -> int:
    """Record the halts the pipeline set, inside the caller's transaction; a conversation
    halted in the store already keeps its halt (the first says why). The rows written."""
    if not halts:
        return 0
    conversations = sorted({halt.conversation for halt in halts})
    placeholders = ", ".join("?" for _ in conversations)
    halted = {
        h.conversation
        for h in select_halts(
            con,
            f"FROM ({IN_FORCE}) WHERE halted AND conversation IN ({placeholders})",
            conversations,
        )
    }
    written = 0
    for halt in halts:
        if halt.conversation in halted:
            continue
        halted.add(halt.conversation)
        write_halt(
            con,
            halt.conversation,
            True,
            PIPELINE,
            clip_reason(halt.reason),
            source=halt.source,
            trace_id=halt.trace_id,
        )
        written += 1
    return written


def clip_reason(reason: str) -> str:
    """One line of at most MAX_REASON characters."""
    reason = " ".join(reason.split())
    return reason if len(reason) <= MAX_REASON else reason[: MAX_REASON - 1] + "…"


def _now_naive() -> datetime:
    """Now in UTC without a zone, as every TIMESTAMP of the store."""
    return datetime.now(UTC).replace(tzinfo=None)
