"""Conversations a person halted, kept in the store so any process can halt or lift one.

An operator who sees an agent misbehave halts its conversation from the CLI (`otel-safety
halt`), and every guard following the store (`Guard(approvals=...)`, see
`halt_follower.py`) refuses that conversation's next tool calls until someone lifts the
halt (`otel-safety unhalt`). A history, like resolutions: each halt and lift is a row, and
the latest row per conversation is in force, so who stopped an agent and who let it go on
stays on record.
"""

from __future__ import annotations

from datetime import UTC, datetime

from pydantic import BaseModel, ConfigDict

from otel_safety.approvals.store import SharedStoreFile, cannot_write
from otel_safety.exporters.duckdb import StoreError, connect_store

__all__ = ["HaltStore", "NotHalted", "StoredHalt"]

MAX_REASON = 500
MAX_CONVERSATION = 256
_COLUMNS = "seq, conversation, halted, decided_at, decided_by, reason"
_IN_FORCE = f"""
SELECT {_COLUMNS} FROM halts
QUALIFY row_number() OVER (PARTITION BY conversation ORDER BY seq DESC) = 1
"""


class NotHalted(ValueError):
    """A lift of a conversation no halt is in force for."""


class StoredHalt(BaseModel):
    """One halt or lift, as the store keeps it."""

    model_config = ConfigDict(extra="forbid")

    seq: int
    conversation: str
    halted: bool
    decided_at: datetime
    decided_by: str | None = None
    reason: str | None = None


class HaltStore(SharedStoreFile):
    """Halt, lift and list halted conversations in the store file."""

    def halt(self, conversation: str, *, by: str, reason: str) -> StoredHalt:
        """Halt `conversation` (again, with this reason, if it is halted already)."""
        conversation, reason = _conversation(conversation), _reason(reason)
        with self._transaction() as con:
            return self._write(con, conversation, True, by, reason)

    def lift(self, conversation: str, *, by: str, reason: str | None = None) -> StoredHalt:
        """Let a halted conversation go on; `NotHalted` when no halt is in force for it."""
        conversation = _conversation(conversation)
        with self._transaction() as con:
            current = _select(con, f"FROM ({_IN_FORCE}) WHERE conversation = ?", [conversation])
            if not current or not current[0].halted:
                raise NotHalted(
                    f"conversation {conversation!r} is not halted in {self.path}; "
                    "`otel-safety halts` lists the halted ones"
                )
            return self._write(con, conversation, False, by, _reason(reason or ""))

    def in_force(self) -> list[StoredHalt]:
        """The halted conversations, the latest halt first; a store that has no halts (or
        cannot be written, as on a read-only disk) is read as it is."""
        return self._read(f"FROM ({_IN_FORCE}) WHERE halted ORDER BY seq DESC")

    def history(self, limit: int = 50) -> list[StoredHalt]:
        """The latest halts and lifts, newest first."""
        return self._read("FROM halts ORDER BY seq DESC LIMIT ?", [max(0, int(limit))])

    def _read(self, query: str, params: list | None = None) -> list[StoredHalt]:
        try:
            with self._transaction() as con:
                return _select(con, query, params or [])
        except StoreError as exc:
            if not cannot_write(exc):
                raise
        with connect_store(self.path, read_only=True) as con:
            tables = {row[0] for row in con.execute("SHOW TABLES").fetchall()}
            return _select(con, query, params or []) if "halts" in tables else []

    @staticmethod
    def _write(con, conversation: str, halted: bool, by: str, reason: str) -> StoredHalt:
        row = con.execute("SELECT coalesce(max(seq), 0) + 1 FROM halts").fetchone()
        seq = int(row[0]) if row else 1
        con.execute(
            f"INSERT INTO halts ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)",
            [seq, conversation, halted, _now_naive(), by.strip() or None, reason or None],
        )
        return _select(con, "FROM halts WHERE seq = ?", [seq])[0]


def _select(con, where: str, params: list) -> list[StoredHalt]:
    cursor = con.execute(f"SELECT {_COLUMNS} {where}", params)
    names = [d[0] for d in cursor.description]
    halts = []
    for row in cursor.fetchall():
        fields = dict(zip(names, row, strict=True))
        fields["decided_at"] = fields["decided_at"].replace(tzinfo=UTC)
        halts.append(StoredHalt.model_validate(fields))
    return halts


def _conversation(conversation: str) -> str:
    """The id as the app's spans carry it (`gen_ai.conversation.id`), refused when blank or
    too long to be one."""
    if not conversation or not conversation.strip():
        raise ValueError("give the conversation id to halt (the spans' gen_ai.conversation.id)")
    if len(conversation) > MAX_CONVERSATION:
        raise ValueError(
            f"a conversation id is at most {MAX_CONVERSATION} characters, got {len(conversation)}"
        )
    return conversation


def _reason(reason: str) -> str:
    reason = " ".join(reason.split())
    return reason if len(reason) <= MAX_REASON else reason[: MAX_REASON - 1] + "…"


def _now_naive() -> datetime:
    """Now in UTC without a zone, as every TIMESTAMP of the store."""
    return datetime.now(UTC).replace(tzinfo=None)
