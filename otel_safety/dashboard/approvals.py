"""Pending approvals for the dashboard: listed and decided through the approvals store.

The dashboard only lists and answers; the guard that asked waits on the stored approval and
goes on as soon as it is answered (or blocks the call when it expires).
"""

from __future__ import annotations

from pathlib import Path

from otel_safety.approvals.store import Approval, ApprovalError, ApprovalStore

__all__ = ["ApprovalError", "decide", "pending", "recent"]
LOCK_WAIT = 5.0


def _store(db_path: str | Path) -> ApprovalStore:
    return ApprovalStore(db_path, create=False, lock_wait=LOCK_WAIT)


def pending(db_path: str | Path) -> list[Approval]:
    return _store(db_path).pending()


def recent(db_path: str | Path, limit: int = 20) -> list[Approval]:
    """The latest answered or expired approvals, newest first."""
    return [a for a in _store(db_path).recent(limit=limit) if not a.pending]


def decide(
    db_path: str | Path, approval_id: str, approved: bool, by: str, note: str | None
) -> Approval:
    """Answer one approval; ApprovalError (unknown, already answered, expired) says why not."""
    return _store(db_path).decide(approval_id, approved, by=by, note=note)
