"""What more than one command does with a store file or with how it was called."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import duckdb


def remove_old_store(path: Path, mark: str, command: str) -> None:
    """Demo and eval start from an empty store, but only ever delete one they made."""
    try:
        with duckdb.connect(str(path), read_only=True) as con:
            ours = con.execute(
                "SELECT value FROM otel_safety_meta WHERE key = 'origin'"
            ).fetchone() == (mark,)
    except duckdb.Error:
        ours = False
    if not ours:
        raise ValueError(f"{path} exists and was not made by `{command}`; pass another --db")
    path.unlink()
    Path(f"{path}.wal").unlink(missing_ok=True)


def invoked_as() -> str:
    """How to call us again: the bare name when it is on PATH, else the path used."""
    program = Path(sys.argv[0])
    if program.name == "otel-safety" and shutil.which("otel-safety") != str(program.resolve()):
        return str(program)
    return "otel-safety"
