"""The SQL kit: named queries from `queries/`, parameters, and result rendering."""

from __future__ import annotations

import contextlib
import difflib
import json
import re
from pathlib import Path
from typing import Any

import duckdb

from otel_safety.result_tables import align as align  # re-exported for older callers
from otel_safety.result_tables import render as render
from otel_safety.sql_helpers import WINDOW_PARAMETERS, define_helpers

QUERY_NAME = re.compile(r"^[A-Za-z0-9_\-]+$")
VARIABLE = re.compile(
    r"(?:getvariable|timestamp_param)\(\s*'([A-Za-z_][A-Za-z0-9_]*)'\s*\)|(in_time_window)\("
)
_MISSING_TABLE = re.compile(r"Table with name (\S+) does not exist")
DEFAULT_LIMIT = re.compile(r"getvariable\(\s*'limit_rows'\s*\)\s*,\s*(\d+)")


class QueryError(ValueError):
    """A query could not be found or run; the message says what to do."""


def queries_dir() -> Path:
    """Installed wheels carry the files inside the package; a checkout has them at the top."""
    packaged = Path(__file__).parent / "queries"
    return packaged if packaged.is_dir() else Path(__file__).resolve().parent.parent / "queries"


def available() -> dict[str, str]:
    """Query name -> its header comment's opening question or sentence, wrapped lines
    joined (the header's next part starts with a "Tables:" line)."""
    found = {}
    for path in sorted(queries_dir().glob("*.sql")):
        opening: list[str] = []
        for line in path.read_text(encoding="utf-8").splitlines():
            text = line.removeprefix("--").strip()
            if not line.startswith("--") or (opening and _HEADER_PART.match(text)):
                break
            opening.append(text)
            if text.endswith(("?", ".")):
                break
        found[path.stem] = " ".join(opening).removeprefix(f"{path.stem}:").strip()
    return found


_HEADER_PART = re.compile(r"^(?:Tables|Parameters|Columns)\b|^$")


def unknown_detector(con: duckdb.DuckDBPyConnection, params: dict[str, str]) -> str | None:
    """When `detector` names no detector the store has findings of: a hint naming those it
    has ("detector=tool-guard" finds nothing, quietly, where "tool_guard" was meant)."""
    wanted = params.get("detector")
    if wanted is None:
        return None
    try:
        found = con.execute("SELECT DISTINCT detector FROM findings ORDER BY 1").fetchall()
    except duckdb.Error:
        return None  # a store without findings, or another query's tables
    keys = [row[0] for row in found]
    if wanted in keys:
        return None
    if not keys:
        return f"no finding in the store is by detector {wanted!r}: the store holds no findings yet"
    return f"no finding in the store is by detector {wanted!r}; its detectors: {', '.join(keys)}"


def row_limit(sql: str, params: dict[str, str]) -> int | None:
    """How many rows the query stops at: `limit_rows` as given, else its default in the SQL."""
    if "limit_rows" in params:
        return int(params["limit_rows"])
    default = DEFAULT_LIMIT.search(sql)
    return int(default.group(1)) if default else None


def parameters(sql: str) -> list[str]:
    """The parameters a query reads, in order of first use (the shared macros' included)."""
    found: list[str] = []
    for name, window in VARIABLE.findall(sql):
        found.extend(WINDOW_PARAMETERS if window else (name,))
    return list(dict.fromkeys(found))


def resolve_sql(name_or_sql: str) -> str:
    """A query name, a path to a .sql file, or SQL text."""
    if QUERY_NAME.match(name_or_sql):
        path = queries_dir() / f"{name_or_sql}.sql"
        if not path.is_file():
            known = list(available())
            close = difflib.get_close_matches(name_or_sql, known, n=1)
            guess = f" (did you mean {close[0]}?)" if close else ""
            names = ", ".join(known) or "none"
            raise QueryError(f"no query named {name_or_sql!r}{guess}; available: {names}")
        return path.read_text(encoding="utf-8")
    if name_or_sql.endswith(".sql"):
        path = Path(name_or_sql)
        if not path.is_file():
            raise QueryError(f"no such SQL file: {name_or_sql}")
        return path.read_text(encoding="utf-8")
    return name_or_sql


def run(
    con: duckdb.DuckDBPyConnection,
    sql: str,
    params: dict[str, str] | None = None,
    *,
    parse_json: bool = False,
) -> tuple[list[str], list[tuple[Any, ...]]]:
    """Set the parameters as DuckDB variables (as the CLI user would), then run the SQL.

    With `parse_json`, JSON columns come back as Python values, so JSON output nests them
    instead of quoting a JSON document inside a string."""
    define_helpers(con)
    known = parameters(sql)
    for name, value in (params or {}).items():
        if name not in known:
            offered = ", ".join(known) or "none"
            raise QueryError(f"the query has no parameter {name!r}; its parameters: {offered}")
        if name == "limit_rows" and not (value.strip().isdecimal() and int(value) > 0):
            raise QueryError(f"limit_rows must be a whole number above 0, got {value!r}")
        # As text: an id of digits ("007") stays that id; the files cast what they count.
        con.execute(f"SET VARIABLE {name} = ?", [value])
    try:
        result = con.execute(sql)
    except duckdb.CatalogException as exc:
        raise QueryError(_missing_table(con, str(exc).strip())) from exc
    except duckdb.Error as exc:
        if "read-only mode" in str(exc):
            raise QueryError(
                "the store is open read-only here (an app or `serve` may be writing it), so SQL "
                "that changes it is refused: labels change with `otel-safety label` or `labels "
                "import`, resolutions with `resolve`"
            ) from exc
        hint = f" (parameters given: {params})" if params else ""
        raise QueryError(f"{str(exc).strip()}{hint}") from exc
    if result is None:
        raise QueryError("nothing to run: the SQL holds no statement (only blanks or comments)")
    if result.description is None:
        return [], []
    columns = [d[0] for d in result.description]
    rows = result.fetchall()
    parsed = [i for i, d in enumerate(result.description) if str(d[1]) == "JSON"]
    if parse_json and parsed:
        rows = [_parse_json(row, parsed) for row in rows]
    return columns, rows


def _missing_table(con: duckdb.DuckDBPyConnection, message: str) -> str:
    """DuckDB's error for a table the store lacks, its "Did you mean" (a system table, often)
    replaced by the store's own tables and views."""
    found = _MISSING_TABLE.search(message)
    if found is None:
        return message
    listed = con.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main' "
        "ORDER BY table_name"
    ).fetchall()
    names = ", ".join(row[0] for row in listed) or "none yet"
    close = difflib.get_close_matches(found.group(1), [row[0] for row in listed], n=1)
    guess = f" (did you mean {close[0]}?)" if close else ""
    return f"the store has no table or view {found.group(1)!r}{guess}. Its tables: {names}"


def _parse_json(row: tuple[Any, ...], indices: list[int]) -> tuple[Any, ...]:
    values = list(row)
    for i in indices:
        if isinstance(values[i], str):
            with contextlib.suppress(ValueError):  # else keep what the store holds
                values[i] = json.loads(values[i])
    return tuple(values)
