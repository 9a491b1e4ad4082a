"""Who else serves into this store: one `serve` per DuckDB file is the expected set-up.

Two `serve` processes can share a file (each opens it about once a second to write, so they
take turns), but each then waits on the other's lock and a user rarely means it. The first
`serve` holds an advisory lock on `<db>.serve.lock` for its lifetime and removes the file
when it stops; a second one finds it held and says so. POSIX only (fcntl); elsewhere
nothing is claimed.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import IO

__all__ = ["StoreClaim", "claim_store"]


class StoreClaim:
    """The held lock on `<db>.serve.lock`; `release()` removes the file and drops the lock."""

    def __init__(self, path: Path, handle: IO[str]) -> None:
        self.path = path
        self.handle = handle

    def release(self) -> None:
        """Remove the lock file while still holding it, so no one is left waiting on a
        file that is gone, then close it (which drops the lock). Safe to call twice."""
        if self.handle.closed:
            return
        with contextlib.suppress(OSError):  # a read-only folder: the file stays, lock goes
            self.path.unlink(missing_ok=True)
        self.handle.close()


def claim_store(db_path: str) -> tuple[StoreClaim | None, str | None]:
    """(the claim, None), or (None, the other holder's pid) when it is taken.

    Keep the claim while serving and release it when done."""
    try:
        import fcntl
    except ImportError:  # not POSIX: no claim, no warning
        return None, None
    path = Path(f"{db_path}.serve.lock")
    try:
        handle = path.open("a+", encoding="utf-8")
    except OSError:
        return None, None  # an unwritable folder fails later, with the store's own error
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.seek(0)
        holder = handle.read().strip() or "unknown"
        handle.close()
        return None, holder
    handle.seek(0)
    handle.truncate()
    handle.write(str(os.getpid()))
    handle.flush()
    return StoreClaim(path, handle), None
