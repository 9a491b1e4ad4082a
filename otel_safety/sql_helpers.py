"""SQL the named queries share: time-window parameters and the labels in force.

Defined once here and created two ways: kept in every store (so `duckdb otel-safety.duckdb`
users can run a query file as it is) and as temporary objects on each connection a query
runs on (so a store written by an older version, a read-only file or a DuckLake catalog
offers them too).
"""

from __future__ import annotations

import duckdb

# The label in force per (trace, detector): the latest written. One import never gives a
# pair two values, so two labels of a pair written at the same instant do not disagree.
EFFECTIVE_LABELS_SQL = """
SELECT trace_id, detector, label, source, note, span_id, created_at
FROM labels
QUALIFY row_number() OVER (
    PARTITION BY trace_id, detector ORDER BY created_at DESC, label DESC) = 1
"""

# Query parameters these helpers read on the query's behalf, so the SQL kit can offer them.
WINDOW_PARAMETERS = ("since", "until")


def helpers_ddl(*, temporary: bool) -> list[str]:
    """The statements that create the helpers (persistent in a store, or per connection)."""
    temp = "TEMP " if temporary else ""
    return [
        # A timestamp with an offset (Z, +02:00) is that instant in UTC, as the store keeps
        # times; one without is UTC already (a plain cast dropped the offset).
        f"""CREATE OR REPLACE {temp}MACRO timestamp_param(name) AS
    CASE WHEN getvariable(name) IS NULL THEN NULL
         ELSE coalesce(
             CASE WHEN regexp_matches(CAST(getvariable(name) AS VARCHAR),
                                      '\\d:\\d\\d(:\\d\\d(\\.\\d+)?)?\\s*([zZ]|[+-]\\d\\d(:?\\d\\d)?)\\s*$')
                  THEN timezone('UTC', try_cast(CAST(getvariable(name) AS VARCHAR) AS TIMESTAMPTZ))
                  ELSE try_cast(CAST(getvariable(name) AS VARCHAR) AS TIMESTAMP) END,
             error(name || ' must be a date or timestamp like 2025-06-01, got '
                   || CAST(getvariable(name) AS VARCHAR))) END""",
        f"""CREATE OR REPLACE {temp}MACRO in_time_window(ts) AS
    (timestamp_param('since') IS NULL OR ts >= timestamp_param('since'))
    AND (timestamp_param('until') IS NULL OR ts < timestamp_param('until'))""",
        f"CREATE OR REPLACE {temp}VIEW effective_labels AS {EFFECTIVE_LABELS_SQL}",
    ]


def define_helpers(con: duckdb.DuckDBPyConnection, *, temporary: bool = True) -> None:
    """Create the helpers on `con`; temporary ones need no write access to the store.

    A database without a `labels` table (not an otel-safety store) gets the macros only."""
    for statement in helpers_ddl(temporary=temporary):
        try:
            con.execute(statement)
        except duckdb.CatalogException:
            if "VIEW effective_labels" not in statement:
                raise
    if temporary:
        _drop_needless_twin(con)


def _drop_needless_twin(con: duckdb.DuckDBPyConnection) -> None:
    """Drop the temporary view when the store keeps the same one: both would be listed
    (`SHOW TABLES` named `effective_labels` twice). A store whose view differs (written by
    an older version) keeps the temporary one, which reads as this version does."""
    rows = con.execute(
        "SELECT temporary, sql FROM duckdb_views() WHERE view_name = 'effective_labels' "
        "AND (temporary OR database_name = current_database())"
    ).fetchall()
    bodies = {temporary: sql.split(" AS ", 1)[-1] for temporary, sql in rows}
    if len(rows) == 2 and bodies.get(True) == bodies.get(False):
        con.execute("DROP VIEW temp.main.effective_labels")
