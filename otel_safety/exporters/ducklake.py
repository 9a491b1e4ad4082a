"""DuckLake: one store for many otel-safety instances (PostgreSQL catalog, Parquet data files).

A DuckDB file takes one writing process; a lake takes many. Every sidecar instance attaches
the same lake and appends its traces; any DuckDB client that attaches it reads all of them,
and because `connect()` makes the lake the default database (`USE`), the files in `queries/`
run unchanged.

The `ducklake` and `postgres_scanner` extensions are loaded from the pip packages
`duckdb-extension-ducklake` and `duckdb-extension-postgres-scanner`, which must be the same
version as `duckdb` (the `lake` extra pins all three); nothing is downloaded at run time.

DuckLake has no primary keys, so "writing a trace twice keeps one copy" is kept by hand: a
batch first deletes the rows it replaces, for the traces this instance has written before
(trace-id routing sends every span of a trace to the same instance, so no other instance
writes them). First writes, the common case, are pure appends, which never conflict.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import time
from collections import OrderedDict
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb

from otel_safety.deep.names import DETECTOR as DEEP_DETECTOR
from otel_safety.exporters.batching import BatchingSink
from otel_safety.exporters.duckdb import StoreError, insert_rows, rollback, rows_by_table
from otel_safety.exporters.list_params import json_lists, unnested
from otel_safety.exporters.schema import (
    FINDINGS,
    SCHEMA_VERSION,
    SPANS,
    TABLES,
    TRACES,
    Table,
    added_columns,
)
from otel_safety.exporters.trace_fragments import fold_fragments
from otel_safety.extras import install_hint as extra_hint
from otel_safety.fork_inheritance import keep_forever
from otel_safety.pipeline import TraceEvaluation

logger = logging.getLogger(__name__)

ALIAS = "lake"
EXTENSIONS = {
    "ducklake": "duckdb_extension_ducklake",
    "postgres_scanner": "duckdb_extension_postgres_scanner",
}
META_DDL = "CREATE TABLE IF NOT EXISTS otel_safety_meta (key VARCHAR NOT NULL, value VARCHAR);"


class LakeError(StoreError):
    """The lake cannot be used: extensions missing, catalog unreachable, newer schema."""


class _AttachFailed(LakeError):
    """Attaching failed: the catalog may be unreachable or busy being created; retried."""


def extension_path(name: str) -> Path:
    """The extension file shipped by its pip package, for the running duckdb version."""
    package = EXTENSIONS[name]
    spec = importlib.util.find_spec(package)
    pip_name = package.replace("_", "-")
    if spec is None or spec.origin is None:
        raise LakeError(f"the DuckDB {name} extension is not installed: {install_hint(pip_name)}")
    path = (
        Path(spec.origin).parent
        / "extensions"
        / f"v{duckdb.__version__}"
        / f"{name}.duckdb_extension"
    )
    if not path.is_file():
        found = sorted(p.name for p in (Path(spec.origin).parent / "extensions").glob("v*"))
        raise LakeError(
            f"{pip_name} has no build for duckdb {duckdb.__version__} "
            f"(it has {', '.join(found) or 'none'}): {install_hint(pip_name)}"
        )
    return path


def lake_pins() -> dict[str, str]:
    """Package -> version the `lake` extra pins, read from the installed package's metadata
    (pyproject.toml is the one place the pins are written)."""
    from importlib import metadata

    try:
        requirements = metadata.requires("otel-safety") or []
    except metadata.PackageNotFoundError:
        return {}
    pins = {}
    for requirement in requirements:
        spec, _, marker = requirement.partition(";")
        name, pinned, version = spec.partition("==")
        if pinned and marker.replace('"', "'").strip() == "extra == 'lake'":
            pins[name.strip().lower().replace("_", "-")] = version.strip()
    return pins


def install_hint(pip_name: str) -> str:
    """What to install: only versions the `lake` extra pins, which exist together."""
    pins = lake_pins()
    wanted = pins.get("duckdb")
    if wanted and wanted != duckdb.__version__:
        return (
            f"{extra_hint('lake')}, which installs duckdb {wanted} with the "
            f"extensions built for it (this environment has duckdb {duckdb.__version__})"
        )
    if pip_name in pins:
        return f"{extra_hint('lake')} (or {pip_name}=={pins[pip_name]})"
    return extra_hint("lake")


def catalog_spec(catalog: str) -> str:
    """Accept `postgres:dbname=...`, `ducklake:postgres:...` or a DuckDB catalog file path."""
    return catalog if catalog.startswith("ducklake:") else f"ducklake:{catalog}"


def shared_catalog(catalog: str) -> bool:
    """Whether many processes can use the catalog at once (PostgreSQL, MySQL, SQLite), not
    a DuckDB catalog file, which the process that opens it holds."""
    spec = catalog_spec(catalog).removeprefix("ducklake:")
    return spec.startswith(("postgres:", "mysql:", "sqlite:"))


def connect(
    catalog: str,
    data_path: str | None = None,
    *,
    read_only: bool = False,
    attempts: int = 5,
) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with the lake attached as `lake` and in use.

    `data_path` is needed when the lake is created (where its Parquet files go); later
    attaches read it from the catalog. Credentials belong in the catalog string's libpq
    settings, `PGPASSWORD` / `~/.pgpass`, never on a command line. Instances starting
    together race to create a new lake's catalog tables; the losers try again.
    """
    for attempt in range(attempts):
        try:
            return _connect(catalog, data_path, read_only)
        except _AttachFailed:
            if attempt + 1 == attempts:
                raise
            time.sleep(0.25 * (attempt + 1))
    raise AssertionError("unreachable")


def _connect(catalog: str, data_path: str | None, read_only: bool) -> duckdb.DuckDBPyConnection:
    spec = catalog_spec(catalog)
    con = duckdb.connect(config={"autoinstall_known_extensions": False})
    try:
        con.execute(f"LOAD {_literal(str(extension_path('ducklake')))}")
        if spec.startswith("ducklake:postgres:"):
            con.execute(f"LOAD {_literal(str(extension_path('postgres_scanner')))}")
        options = []
        if data_path:
            options.append(f"DATA_PATH {_literal(data_path)}")
        if read_only:
            options.append("READ_ONLY")
        suffix = f" ({', '.join(options)})" if options else ""
        con.execute(f"ATTACH {_literal(spec)} AS {ALIAS}{suffix}")
        con.execute(f"USE {ALIAS}")
    except duckdb.Error as exc:
        con.close()
        raise _AttachFailed(f"cannot attach the lake {_redacted(spec)}: {exc}") from exc
    except LakeError:
        con.close()
        raise
    return con


def ensure_lake_schema(con: duckdb.DuckDBPyConnection, attempts: int = 5) -> None:
    """Create the tables on first use (several instances may race; the loser retries)."""
    for attempt in range(attempts):
        try:
            con.execute("BEGIN TRANSACTION")
            con.execute(META_DDL)
            for table in TABLES:
                con.execute(table.ddl())
            row = con.execute(
                "SELECT max(value::INTEGER) FROM otel_safety_meta WHERE key = 'schema_version'"
            ).fetchone()
            if row is None or row[0] is None:
                con.execute(
                    "INSERT INTO otel_safety_meta VALUES ('schema_version', ?)",
                    [str(SCHEMA_VERSION)],
                )
            elif int(row[0]) > SCHEMA_VERSION:
                con.execute("ROLLBACK")
                raise LakeError(
                    f"the lake has schema version {row[0]}, newer than this otel-safety "
                    f"({SCHEMA_VERSION}); upgrade otel-safety to write to it"
                )
            elif int(row[0]) < SCHEMA_VERSION:  # an older lake: add the newer columns
                _add_columns(con, int(row[0]))
                con.execute(
                    "INSERT INTO otel_safety_meta VALUES ('schema_version', ?)",
                    [str(SCHEMA_VERSION)],
                )
            con.execute("COMMIT")
            return
        except duckdb.Error as exc:
            rollback(con)
            if attempt + 1 == attempts:
                raise LakeError(f"cannot create the otel-safety tables in the lake: {exc}") from exc
            time.sleep(0.2 * (attempt + 1))


def _add_columns(con: duckdb.DuckDBPyConnection, since: int) -> None:
    for table in TABLES:
        present = {
            row[0]
            for row in con.execute(
                "SELECT column_name FROM information_schema.columns "
                "WHERE table_catalog = ? AND table_name = ?",
                [ALIAS, table.name],
            ).fetchall()
        }
        for column, kind in added_columns(table, since):
            if column not in present:
                con.execute(f"ALTER TABLE {table.name} ADD COLUMN {column} {kind}")


class DuckLakeStore(BatchingSink):
    """A sink writing evaluated traces to a DuckLake shared with other instances.

    Like `DuckDBStore`, it batches: at most one transaction per `write_interval` seconds
    (each is a lake snapshot, and small ones make small files). A failed write is kept and
    retried on the next tick, up to `max_pending` traces; beyond that the oldest are dropped
    with an error in the log, so a lost catalog cannot eat the process's memory.
    """

    retry_on = (duckdb.Error, LakeError, StoreError)
    flush_poll = 0.2

    def __init__(
        self,
        catalog: str,
        data_path: str | None = None,
        *,
        write_interval: float = 1.0,
        max_pending: int = 50_000,
        remember: int = 100_000,
    ) -> None:
        self.catalog = catalog
        self.data_path = data_path
        self.path = _redacted(catalog_spec(catalog))  # for messages, like DuckDBStore.path
        super().__init__(self.path, write_interval=write_interval, max_pending=max_pending)
        self._remember = remember
        self._written: OrderedDict[str, None] = OrderedDict()
        self._con: duckdb.DuckDBPyConnection | None = connect(catalog, data_path)
        ensure_lake_schema(self._con)
        if not shared_catalog(catalog):
            logger.warning(
                "the lake's catalog %s is a DuckDB file, which one process holds at a time: "
                "while this one writes, no other process can read or write the lake (queries "
                "fail with a lock error); give a PostgreSQL catalog (postgres:...) to share it",
                self.path,
            )

    def _store(self, evaluations: Sequence[TraceEvaluation]) -> None:
        try:
            self._insert(self._connection(), evaluations)
        except self.retry_on:
            self._reset()  # the catalog may have restarted under the connection
            raise

    def _forget_connection(self) -> None:
        if self._con is not None:
            keep_forever(self._con)  # freeing it, even at exit, would write the parent's lake
        self._con = None

    def _close(self) -> None:
        if self._con is not None:
            self._con.close()
            self._con = None

    def _connection(self) -> duckdb.DuckDBPyConnection:
        if self._con is None:
            self._con = connect(self.catalog, self.data_path)
        return self._con

    def _reset(self) -> None:
        """Drop a connection that failed: the catalog may have restarted under it."""
        if self._con is not None:
            with contextlib.suppress(duckdb.Error):
                self._con.close()
            self._con = None

    def _insert(
        self, con: duckdb.DuckDBPyConnection, evaluations: Sequence[TraceEvaluation]
    ) -> None:
        now = datetime.now(UTC).replace(tzinfo=None)
        tables = rows_by_table(evaluations, now)
        spans_again = [
            row
            for table, table_rows in tables
            if table is SPANS
            for row in table_rows
            if row["trace_id"] in self._written
        ]
        con.execute("BEGIN TRANSACTION")
        try:
            for table, table_rows in tables:
                unique = list({tuple(r[k] for k in table.key): r for r in table_rows}.values())
                if table is FINDINGS:
                    _forget_findings_judged_again(con, spans_again)
                if table is TRACES:
                    fold_fragments(con, unique, lambda part: self._replace(con, TRACES, part))
                    continue
                self._replace(con, table, unique)
            con.execute("COMMIT")
        except Exception:
            rollback(con)
            raise
        for evaluation in evaluations:
            self._written[evaluation.trace_id] = None
            self._written.move_to_end(evaluation.trace_id)
        while len(self._written) > self._remember:
            self._written.popitem(last=False)

    def _replace(
        self, con: duckdb.DuckDBPyConnection, table: Table, rows: list[dict[str, Any]]
    ) -> None:
        self._delete_replaced(con, table, rows)
        insert_rows(con, table, rows)

    def _delete_replaced(
        self, con: duckdb.DuckDBPyConnection, table: Table, rows: list[dict[str, Any]]
    ) -> None:
        again = [row for row in rows if row["trace_id"] in self._written]
        if not again:
            return
        keys = ", ".join(f"{unnested(f'k{i}')} AS k{i}" for i in range(len(table.key)))
        match = " AND ".join(
            f"{table.name}.{column} = keys.k{i}" for i, column in enumerate(table.key)
        )
        params = json_lists(
            {f"k{i}": [row[column] for row in again] for i, column in enumerate(table.key)}
        )
        con.execute(f"DELETE FROM {table.name} USING (SELECT {keys}) AS keys WHERE {match}", params)


def _forget_findings_judged_again(
    con: duckdb.DuckDBPyConnection, spans: list[dict[str, Any]]
) -> None:
    """As in a DuckDB store: spans written again keep only their new judgement's findings
    (those of detectors that did not judge them this time would stay beside a trace level
    they no longer make); a deep analysis is a write of its own and stays."""
    if not spans:
        return
    con.execute(
        f"DELETE FROM findings USING (SELECT {unnested('traces')} AS trace_id, "
        f"{unnested('spans')} AS span_id) AS judged WHERE findings.trace_id = judged.trace_id "
        "AND findings.span_id = judged.span_id AND findings.detector <> $deep",
        {
            **json_lists(
                {
                    "traces": [row["trace_id"] for row in spans],
                    "spans": [row["span_id"] for row in spans],
                }
            ),
            "deep": DEEP_DETECTOR,
        },
    )


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _redacted(spec: str) -> str:
    """The catalog string for messages, without a password someone put in it."""
    return " ".join(
        "password=***" if part.lower().startswith("password=") else part for part in spec.split(" ")
    )
