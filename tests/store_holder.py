"""Another process holding a DuckDB file, as a notebook or a second app would, until the
test lets go."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

_HOLD = (
    "import duckdb, sys; c = duckdb.connect(sys.argv[1], read_only=sys.argv[2] == 'ro'); "
    "print('held', flush=True); sys.stdin.readline()"
)


class HeldStore:
    """`with HeldStore(path):` the file is held (read-only with `read_only`) inside the block;
    `release()` lets it go earlier. The process is always stopped on leaving."""

    def __init__(self, path: Path, *, read_only: bool = False) -> None:
        self._process = subprocess.Popen(
            [sys.executable, "-c", _HOLD, str(path), "ro" if read_only else "rw"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def __enter__(self) -> HeldStore:
        assert self._process.stdout is not None
        assert self._process.stdout.readline().strip() == "held"
        return self

    def release(self) -> None:
        if self._process.stdin is not None and not self._process.stdin.closed:
            self._process.stdin.write("\n")
            self._process.stdin.close()
        self._process.wait(30)

    def __exit__(self, *exc: object) -> None:
        self._process.kill()
        self._process.wait(10)
