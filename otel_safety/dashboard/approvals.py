"""Pending approvals for the dashboard: listed and decided through the approvals store.

The dashboard only lists and answers; the guard that asked waits on the stored approval and
goes on as soon as it is answered (or blocks the call when it expires).
"""

from __future__ import annotations

from pathlib import Path

from otel_safety.approvals.store import Approval, ApprovalError, ApprovalStore

__all__ = ["ApprovalError", "decide", "panel", "withdraw"]
LOCK_WAIT = 5.0


def _store(db_path: str | Path) -> ApprovalStore:
    return ApprovalStore(db_path, create=False, lock_wait=LOCK_WAIT)


def panel(db_path: str | Path, limit: int = 20) -> tuple[list[Approval], list[Approval]]:
    """(pending oldest first, answered or expired newest first). Read one after the other,
    so an answer given in between is shown as answered only, never as both."""
    store = _store(db_path)
    waiting = store.pending()
    closed = [a for a in store.recent(limit=limit) if not a.pending]
    answered = {a.id for a in closed}
    return [a for a in waiting if a.id not in answered], closed


def decide(
    db_path: str | Path, approval_id: str, approved: bool, by: str, note: str | None
) -> Approval:
    """Answer one approval; ApprovalError (unknown, already answered, expired) says why not."""
    return _store(db_path).decide(approval_id, approved, by=by, note=note)


def withdraw(db_path: str | Path, approval_id: str, by: str, note: str | None) -> Approval:
    """Take an answer back, so that similar calls are asked about again; ApprovalError says
    why not (unknown, pending, expired)."""
    return _store(db_path).withdraw(approval_id, by=by, note=note)
