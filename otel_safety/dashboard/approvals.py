"""Pending approvals for the dashboard: read them and decide them through the approvals store.

The dashboard only lists and decides; the guard that asked waits on the stored approval and
goes on when it is decided (or expires). Without the approvals module the panel says so.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

try:
    from otel_safety.approvals.store import ApprovalError, ApprovalStore
except ImportError:  # an install without the approvals store: the panel is hidden
    ApprovalStore = None  # type: ignore[assignment,misc]
    ApprovalError = ValueError  # type: ignore[assignment,misc]

AVAILABLE = ApprovalStore is not None


def pending(db_path: str | Path) -> list[Any]:
    return list(ApprovalStore(db_path).pending()) if AVAILABLE else []


def recent(db_path: str | Path, limit: int = 20) -> list[Any]:
    if not AVAILABLE:
        return []
    return [a for a in ApprovalStore(db_path).recent(limit=limit) if a.status != "pending"]


def decide(db_path: str | Path, approval_id: str, approved: bool, by: str, note: str | None):
    """Decide one approval; ApprovalError (unknown, already decided) says why not."""
    if not AVAILABLE:
        raise ApprovalError("this install has no approvals store")
    return ApprovalStore(db_path).decide(approval_id, approved, by=by, note=note)
