"""What more than one command does with a store file or with how it was called."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import NoReturn

import duckdb

from otel_safety.exporters.duckdb import (
    StoreError,
    connect_store,
    looks_like_duckdb,
    refuse_other_files,
)

# The store `demo` writes in the directory it runs in: not the default store, so after a
# demo the commands that read a store find none unless given this file.
DEMO_DB = "otel-safety-demo.duckdb"


def no_store_hint() -> str:
    """What to add to "no store at PATH": the stores the current folder holds, how to make
    one, and the file `demo` wrote."""
    here = sorted(path.name for path in Path.cwd().glob("*.duckdb") if path.name != DEMO_DB)
    shown = ", ".join(here[:3]) + (f" and {len(here) - 3} more" if len(here) > 3 else "")
    return (
        (
            f"; this folder holds {shown} (pass {'it' if len(here) == 1 else 'one'} with --db)"
            if here
            else ""
        )
        + "; create one with `otel-safety ingest`, `serve`, `eval` or an app, or after "
        f"`otel-safety demo` pass --db {DEMO_DB}"
    )


def require_store(path: str | Path, hint: str | None = None) -> None:
    """Fail with the shared hint (or `hint`) when the store a command reads is missing, or
    is another DuckDB database (which a writing command would fill with otel-safety's
    tables), before the command prints or loads anything."""
    refuse_other_files(path)  # a folder is named as one, not listed as "no store"
    if not Path(path).is_file():
        raise StoreError(f"no store at {path}{no_store_hint() if hint is None else hint}")
    try:
        con = connect_store(path, read_only=True)  # a trace file or other data: refused here
    except duckdb.Error:
        return  # held by a writer: a store being written (the command waits for it)
    with con:
        ours = con.execute(
            "SELECT count(*) FROM duckdb_tables() WHERE table_name = 'otel_safety_meta'"
        ).fetchone()[0]
    if not ours:
        raise StoreError(
            f"{path} is a DuckDB database but not an otel-safety store (no otel_safety_meta "
            f"table){no_store_hint() if hint is None else hint}"
        )


def refuse_overwriting_a_store(out: str | Path) -> None:
    """An `--out` file is written whole: never over a DuckDB database (the store the command
    reads, given twice by a slip, or any other), nor where a folder is; both refused before
    any work is done."""
    if Path(out).is_dir():
        raise ValueError(f"--out {out} is a folder: give the path of a file to write")
    try:
        duckdb_file = looks_like_duckdb(out)
    except OSError:
        return  # missing, or unreadable: refused when written, with the system's message
    if duckdb_file:
        raise ValueError(
            f"--out {out} is a DuckDB database; writing it would destroy it: pass another file"
        )


def check_replaceable(
    path: Path, mark: str, command: str, warn_of: Mapping[str, str] | None = None
) -> dict[str, int]:
    """Demo and eval start from an empty store, but only ever replace one they made: refuse
    any other file, and one another process holds, before any work. Returns, per table of
    `warn_of` ({table: which of its rows a user added, as SQL}), how many rows go with it."""
    try:
        with duckdb.connect(str(path), read_only=True) as con:
            ours = con.execute(
                "SELECT value FROM otel_safety_meta WHERE key = 'origin'"
            ).fetchone() == (mark,)
            return _row_counts(con, warn_of or {}) if ours else _refuse(path, command)
    except duckdb.Error as exc:
        if "lock" in str(exc).lower():
            raise ValueError(
                f"{path} is held by another process; close it there (or pass another --db)"
            ) from None
        return _refuse(path, command)  # not a DuckDB file, or not an otel-safety store


def _refuse(path: Path, command: str) -> NoReturn:
    raise ValueError(f"{path} exists and was not made by `{command}`; pass another --db")


def remove_old_store(
    path: Path, mark: str, command: str, warn_of: Mapping[str, str] | None = None
) -> None:
    """Delete a store `command` made (see `check_replaceable`); one holding rows of `warn_of`
    a user added (a reviewer's labels) is kept beside it instead, as `<path>.replaced`, and
    said on stderr: a run must not cost the work of hand labelling."""
    dropped = check_replaceable(path, mark, command, warn_of)
    wal = Path(f"{path}.wal")
    if not any(dropped.values()):
        path.unlink()
        wal.unlink(missing_ok=True)
        return
    kept = path.with_name(f"{path.name}.replaced")
    path.replace(kept)
    if wal.exists():
        wal.replace(Path(f"{kept}.wal"))
    else:
        Path(f"{kept}.wal").unlink(missing_ok=True)  # an earlier copy's, not this one's
    verb = "is" if sum(dropped.values()) == 1 else "are"
    print(
        f"replacing {path}: its {_listed(dropped)} {verb} not in the new store; the old one "
        f"is kept as {kept}{_taking_over(dropped, kept)}",
        file=sys.stderr,
    )


def _taking_over(dropped: Mapping[str, int], kept: Path) -> str:
    """How each kind of row left behind is taken over, or read where it stays."""
    ways = []
    if dropped.get("labels"):
        ways.append(
            f"`otel-safety labels export --db {kept}`, then `labels import`, takes the labels over"
        )
    others = [table for table, n in dropped.items() if n and table != "labels"]
    if others:
        ways.append(
            f"the {' and '.join(others)} stay there to read "
            f'(`otel-safety query "SELECT * FROM {others[0]}" --db {kept}`)'
        )
    return f" ({'; '.join(ways)})" if ways else ""


def replace_store(
    made: Path, path: Path, mark: str, command: str, warn_of: Mapping[str, str]
) -> None:
    """Put the store `made` (written beside) where `path` is: an interrupted run leaves the
    store it was to replace as it was."""
    if path.exists():
        remove_old_store(path, mark, command, warn_of)
    made.replace(path)
    wal = Path(f"{made}.wal")
    if wal.exists():
        wal.replace(Path(f"{path}.wal"))


def _row_counts(con: duckdb.DuckDBPyConnection, tables: Mapping[str, str]) -> dict[str, int]:
    """Rows per table that meet its condition; a table the store lacks (an older store)
    holds none."""
    present = {row[0] for row in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
    return {
        table: con.execute(f'SELECT count(*) FROM "{table}" WHERE {condition}').fetchone()[0]
        if table in present
        else 0
        for table, condition in tables.items()
    }


def _listed(counts: dict[str, int]) -> str:
    """`{"labels": 2, "resolutions": 1}` as "2 labels and 1 resolution" (tables are plurals)."""
    parts = [
        f"{n} {table if n != 1 else table.removesuffix('s')}" for table, n in counts.items() if n
    ]
    return " and ".join([", ".join(parts[:-1]), parts[-1]] if len(parts) > 1 else parts)


def invoked_as() -> str:
    """How to call us again: the bare name when it is on PATH, else the path used."""
    program = Path(sys.argv[0])
    if program.name == "otel-safety" and shutil.which("otel-safety") != str(program.resolve()):
        return str(program)
    return "otel-safety"
