"""What a forked copy of the application inherits from its parent and must not tear down.

A DuckDB database torn down in a child runs its destructor there: it checkpoints the
parent's file under the parent's feet, and it joins worker threads that exist only in the
parent, which can abort the child at exit ("terminate called without an active exception",
status 6). Two such databases reach a child: a store connection open at the fork, which the
child keeps alive for good (the process's end reclaims its memory without a destructor),
and the default in-memory connection that importing `duckdb` opens. That one is freed by
DuckDB's own static destructors at exit whatever Python holds, so instead its background
threads (workers; from DuckDB 2, asynchronous I/O too) are stopped for the moment of the
fork: the child inherits a database with none to join.
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys

__all__ = ["keep_forever", "pause_duckdb_default_at_forks"]

logger = logging.getLogger(__name__)

_paused: list[dict[str, int] | None] = []  # the setting to restore, while a fork is under way
_registered = False


def keep_forever(thing: object) -> None:
    """Add a reference that is never dropped, so not even the interpreter's finalisation
    frees `thing` (a list in a module would: modules are cleared at exit)."""
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(thing))


# The default connection's background threads, each with the value that has none: its
# workers (`threads`, 1 is the calling thread alone) and, from DuckDB 2, its asynchronous I/O
# threads (`async_threads`), which a child exiting with sys.exit() otherwise joins and
# segfaults on (status 139) even with a single worker.
_THREAD_SETTINGS = (("threads", 1), ("async_threads", 0))


def quiet_duckdb_default() -> dict[str, int] | None:
    """Before a fork: the default connection's background threads joined; the settings it
    had, for `restore_duckdb_default`, or None when there was nothing to do."""
    duckdb = sys.modules.get("duckdb")
    if duckdb is None:
        return None
    changed: dict[str, int] = {}
    for name, quiet in _THREAD_SETTINGS:
        try:
            value = int(duckdb.execute(f"SELECT current_setting('{name}')").fetchone()[0])
            if value > quiet:
                duckdb.execute(f"SET {name} TO {quiet}")
                changed[name] = value
        except Exception:  # an older DuckDB without the setting, or the app closed the
            # connection: never raise into the app's fork
            logger.debug("could not pause DuckDB's %s for a fork", name, exc_info=True)
    return changed or None


def restore_duckdb_default(settings: dict[str, int] | None) -> None:
    """After a fork: the default connection's threads as they were."""
    duckdb = sys.modules.get("duckdb")
    if not settings or duckdb is None:
        return
    for name, value in settings.items():
        try:
            duckdb.execute(f"SET {name} TO {int(value)}")
        except Exception:
            logger.debug("could not restore DuckDB's %s after a fork", name, exc_info=True)


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
    settings = _paused.pop() if _paused else None
    _paused.clear()
    restore_duckdb_default(settings)
