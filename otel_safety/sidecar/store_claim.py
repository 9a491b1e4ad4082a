"""Who else serves into this store: one `serve` per DuckDB file is the expected set-up.

Two `serve` processes can share a file (each opens it about once a second to write, so they
take turns), but each then waits on the other's lock and a user rarely means it. The first
`serve` holds an advisory lock on `<db>.serve.lock` for its lifetime; a second one finds it
held and says so. POSIX only (fcntl); elsewhere nothing is claimed.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO

__all__ = ["claim_store"]


def claim_store(db_path: str) -> tuple[IO[str] | None, str | None]:
    """(the held lock file, None), or (None, the other holder's pid) when it is taken.

    Keep the returned file open while serving: closing it releases the claim."""
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
    return handle, None
