"""What more than one command does with a store file or with how it was called."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import duckdb

from otel_safety.exporters.duckdb import StoreError

# The store `demo` writes in the directory it runs in: not the default store, so after a
# demo the commands that read a store find none unless given this file.
DEMO_DB = "otel-safety-demo.duckdb"


def no_store_hint() -> str:
    """What to add to "no store at PATH": how to make one, and the file `demo` wrote."""
    return (
        f"; create one with `otel-safety ingest`, `eval` or an app, or after `otel-safety demo` "
        f"pass --db {DEMO_DB}"
    )


def require_store(path: str | Path, hint: str | None = None) -> None:
    """Fail with the shared hint (or `hint`) when the store a command reads is missing,
    before the command prints or loads anything."""
    if not Path(path).is_file():
        raise StoreError(f"no store at {path}{no_store_hint() if hint is None else hint}")


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
