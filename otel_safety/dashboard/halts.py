"""Halted conversations for the dashboard: listed, halted and lifted through the store.

The guards following the store (`otel_safety.approvals.halt_follower`) read what is set
here within about a second; the dashboard itself stops nothing.
"""

from __future__ import annotations

from pathlib import Path

from otel_safety.approvals.halts import HaltStore, NotHalted, StoredHalt

__all__ = ["NotHalted", "decide", "panel"]
LOCK_WAIT = 5.0


def _store(db_path: str | Path) -> HaltStore:
    return HaltStore(db_path, create=False, lock_wait=LOCK_WAIT)


def panel(db_path: str | Path, limit: int = 20) -> tuple[list[StoredHalt], list[StoredHalt]]:
    """(halts in force, latest first; the latest halts and lifts)."""
    store = _store(db_path)
    return store.in_force(), store.history(limit)


def decide(
    db_path: str | Path, conversation: str, halted: bool, by: str, reason: str | None
) -> StoredHalt:
    """Halt or lift one conversation; NotHalted (a lift of nothing) or ValueError (a blank
    or overlong id, no reason for a halt) says why not."""
    store = _store(db_path)
    if not halted:
        return store.lift(conversation, by=by, reason=reason)
    return store.halt(conversation, by=by, reason=reason or "")
