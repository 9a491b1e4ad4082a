"""`otel-safety query NAME|SQL`: a named query from queries/, a .sql file or SQL text."""

from __future__ import annotations

import argparse
import sys

from otel_safety import queries
from otel_safety.commands.options import add_db, add_format
from otel_safety.commands.stores import no_store_hint
from otel_safety.exporters.duckdb import open_store
from otel_safety.result_tables import render


def add_commands(sub: argparse._SubParsersAction) -> None:
    query = sub.add_parser(
        "query",
        help="run a named query from queries/ or ad-hoc SQL",
        description="Run a query over the store, opened read-only (an app or `serve` may be "
        "writing it). NAME is a file of queries/ without .sql (see --list), a path to a .sql "
        "file, or SQL text. Labels change with `label` and `labels import`, resolutions with "
        "`resolve`.",
    )
    query.add_argument(
        "sql", nargs="?", metavar="NAME|SQL", help="a named query, a .sql file, or SQL text"
    )
    add_db(query, "store file")
    add_format(query, ("table", "csv", "json"), "output format (default: table)")
    query.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="set a query parameter (a DuckDB variable); repeatable",
    )
    query.add_argument(
        "--lake",
        metavar="CATALOG",
        help="query a DuckLake written by `serve --lake` instead of --db "
        "(e.g. 'postgres:dbname=lake host=db user=otel'; needs the lake extra)",
    )
    query.add_argument("--list", action="store_true", help="list the named queries")
    query.set_defaults(handler=cmd_query)


def cmd_query(args: argparse.Namespace) -> int:
    if args.list or not args.sql:
        if not args.list:
            print("give a query NAME, a .sql file or SQL text; the named queries are:\n")
        for name, about in queries.available().items():
            params = queries.parameters(queries.resolve_sql(name))
            print(f"{name:24} {about}")
            if params:
                print(f"{'':24} parameters: {', '.join(params)}")
        return 0 if args.list else 2
    params = {}
    for item in args.param:
        name, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--param expects NAME=VALUE, got {item!r}")
        params[name.strip()] = value
    sql = queries.resolve_sql(args.sql)
    if args.lake:
        from otel_safety.exporters.ducklake import connect

        con = connect(args.lake, read_only=True)
    else:
        con = open_store(args.db, hint=no_store_hint())
    with con:
        columns, rows = queries.run(con, sql, params, parse_json=args.format == "json")
        hint = None if rows else queries.unknown_detector(con, params)
    print(render(columns, rows, args.format))
    if hint:
        print(hint, file=sys.stderr)
    limit = queries.row_limit(sql, params)
    if limit is not None and len(rows) == limit:
        rows_word = "row" if limit == 1 else "rows"
        print(f"(stopped at {limit} {rows_word}; --param limit_rows=N shows more)", file=sys.stderr)
    return 0
