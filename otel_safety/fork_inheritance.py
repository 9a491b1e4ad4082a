"""What a forked copy of the application inherits from its parent and must not tear down.

A DuckDB database torn down in a child runs its destructor there: it checkpoints the
parent's file under the parent's feet, and it joins worker threads that exist only in the
parent, which can abort the child at exit ("terminate called without an active exception",
status 6). Two such databases reach a child: a store connection open at the fork, which the
child keeps alive for good (the process's end reclaims its memory without a destructor),
and the default in-memory connection that importing `duckdb` opens. That one is freed by
DuckDB's own static destructors at exit whatever Python holds, so instead its worker threads
are stopped for the moment of the fork: the child inherits a database with none to join.
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys

__all__ = ["keep_forever", "pause_duckdb_default_at_forks"]

logger = logging.getLogger(__name__)

_paused: list[int | None] = []  # the setting to restore, while a fork is under way
_registered = False


def keep_forever(thing: object) -> None:
    """Add a reference that is never dropped, so not even the interpreter's finalisation
    frees `thing` (a list in a module would: modules are cleared at exit)."""
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(thing))


def quiet_duckdb_default() -> int | None:
    """Before a fork: the default connection's worker threads joined (`threads` set to 1);
    the setting it had, for `restore_duckdb_default`, or None when there was nothing to do."""
    duckdb = sys.modules.get("duckdb")
    if duckdb is None:
        return None
    try:
        threads = int(duckdb.execute("SELECT current_setting('threads')").fetchone()[0])
        if threads > 1:
            duckdb.execute("SET threads TO 1")
            return threads
    except Exception:  # the app may have closed it; never raise into the app's fork
        logger.debug("could not pause DuckDB's default connection for a fork", exc_info=True)
    return None


def restore_duckdb_default(threads: int | None) -> None:
    """After a fork: the default connection's threads as they were."""
    duckdb = sys.modules.get("duckdb")
    if threads is None or duckdb is None:
        return
    try:
        duckdb.execute(f"SET threads TO {int(threads)}")
    except Exception:
        logger.debug("could not restore DuckDB's default connection after a fork", exc_info=True)


def pause_duckdb_default_at_forks() -> None:
    """Have every later fork of this process stop the default connection's threads first
    (once per process, however many engines ask)."""
    global _registered
    if _registered or not hasattr(os, "register_at_fork"):
        return
    _registered = True
    os.register_at_fork(
        before=lambda: _paused.append(quiet_duckdb_default()),
        after_in_parent=lambda: restore_duckdb_default(_paused.pop() if _paused else None),
        after_in_child=_restore_in_child,
    )


def _restore_in_child() -> None:
    """The child's own default connection gets its threads back too: they are started anew
    in the child, so there is none of the parent's to join (an app's own `duckdb.sql()` in a
    pre-fork worker ran on one thread for the worker's whole life)."""
    threads = _paused.pop() if _paused else None
    _paused.clear()
    restore_duckdb_default(threads)
