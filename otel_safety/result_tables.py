"""Query results for people (an aligned table, or one record per row when the terminal is
too narrow for one) and for programs (CSV, JSON)."""

from __future__ import annotations

import base64
import csv
import io
import json
import math
import shutil
import textwrap
from collections.abc import Mapping, Sequence
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

import regex

from otel_safety.analysis.pattern_cache import compiled

__all__ = ["align", "csv_unescaped", "for_spreadsheets", "page_safe", "render", "terminal_safe"]

MAX_CELL = 80  # a table cell's longest text
MIN_CELL = 8  # a shrunk column's narrowest width
# What a column needs to be read at all: its values up to this width, its name up to
# MIN_CELL (a name can be cut in its middle). A table that cannot give every column that
# much is shown as one record per row instead, as `psql`'s expanded display does.
READABLE_CELL = 20
RECORD_VALUE_LINES = 3  # lines a long value wraps to in a record before it is cut
# A CSV cell a spreadsheet would run as a formula (`=HYPERLINK(...)` in an agent's output),
# behind any apostrophes `for_spreadsheets` put there before.
_FORMULA = compiled(r"^'*[=+\-@\t\r]")
# Bidirectional controls: what reorders text, in a page too (`exe.png` shown for `gnp.exe`
# behind U+202E).
_BIDI_CHARS = r"\u200e\u200f\u061c\u202a-\u202e\u2066-\u2069"
# What a web page must not print raw: bidirectional controls (they reorder the text around
# them), control characters but tab and line breaks, line separators and invisible ones.
_PAGE_UNSAFE = compiled(
    rf"[{_BIDI_CHARS}\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u2028\u2029\u200b\ufeff]"
)
# Characters that steer a terminal rather than show (escape sequences, carriage returns,
# bidirectional controls): shown as escapes, so a span cannot redraw the table around it.
_STEERING = compiled(rf"[\p{{Cc}}{_BIDI_CHARS}]")


def render(columns: list[str], rows: list[tuple[Any, ...]], fmt: str = "table") -> str:
    """`rows` as `fmt`: "table" (for a terminal), "csv" or "json"."""
    if fmt == "json":
        return json.dumps(
            [dict(zip(columns, map(_plain, row), strict=True)) for row in rows],
            indent=2,
            allow_nan=False,
        )
    if fmt == "csv":
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(columns)
        writer.writerows([[_csv_cell(v) for v in row] for row in rows])
        return out.getvalue().rstrip("\n")
    return _for_terminal(columns, rows)


def align(lines: Sequence[Sequence[str]]) -> str:
    """Left-aligned text columns with a rule under the header (the first line)."""
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    rendered = [
        "  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip()
        for line in lines
    ]
    rendered.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(rendered)


def _for_terminal(columns: list[str], rows: list[tuple[Any, ...]]) -> str:
    if not columns:
        return "(no result)"
    count = f"({len(rows)} row{'s' if len(rows) != 1 else ''})"
    empty = [c for i, c in enumerate(columns) if rows and all(_blank(row[i]) for row in rows)]
    if empty:  # a column with no value in any row only takes width from those that have one
        kept = [i for i, c in enumerate(columns) if c not in empty]
        columns = [columns[i] for i in kept]
        rows = [tuple(row[i] for i in kept) for row in rows]
        count += f"\n(no values in: {', '.join(empty)})"
    columns = [_text(column) for column in columns]  # a name can come from data (a PIVOT)
    cells = [[_text(v) for v in row] for row in rows]
    budget = max(40, shutil.get_terminal_size((200, 20)).columns)
    if rows and not _fits(columns, cells, budget):
        return _records(columns, cells, budget) + "\n" + count
    return _table(columns, cells, budget) + "\n" + count


def _fits(columns: list[str], cells: list[list[str]], budget: int) -> bool:
    """Whether every column can be given the width it needs to be read (ids whole)."""
    needed = 0
    for i, column in enumerate(columns):
        widest = max(len(row[i]) for row in cells)
        readable = widest if _is_id(column) else min(widest, READABLE_CELL)
        needed += max(readable, min(len(column), MIN_CELL))
    return needed + 2 * (len(columns) - 1) <= budget


def _table(columns: list[str], cells: list[list[str]], budget: int) -> str:
    whole = [_is_id(column) for column in columns]
    cells = [
        [v if keep else _clip(v, MAX_CELL) for v, keep in zip(row, whole, strict=True)]
        for row in cells
    ]
    widths = [max([len(c), *(len(r[i]) for r in cells)]) for i, c in enumerate(columns)]
    widths = _fit(widths, whole, budget)
    header = [_clip_middle(c, w) for c, w in zip(columns, widths, strict=True)]
    lines = [header, *([_clip(c, w) for c, w in zip(line, widths, strict=True)] for line in cells)]
    return align(lines)


def _records(columns: list[str], cells: list[list[str]], budget: int) -> str:
    """One block per row, a column's name then its value on each line; long values wrap."""
    label = max(len(c) for c in columns)
    room = max(20, budget - label - 2)
    blocks = []
    for number, row in enumerate(cells, 1):
        lines = [f"-[ row {number} ]".ljust(min(budget, label + 2 + room), "-")]
        for column, value in zip(columns, row, strict=True):
            if not value:
                continue
            wrapped = _wrapped(value, room, keep=_is_id(column))
            lines.append(f"{column.ljust(label)}  {wrapped[0]}")
            lines.extend(f"{'':{label}}  {more}" for more in wrapped[1:])
        blocks.append("\n".join(lines))
    return "\n".join(blocks)


def _wrapped(value: str, width: int, keep: bool) -> list[str]:
    if keep or len(value) <= width:
        return [value]
    lines = textwrap.wrap(value, width, break_long_words=True, break_on_hyphens=False)
    if len(lines) > RECORD_VALUE_LINES:
        lines = lines[:RECORD_VALUE_LINES]
        last = lines[-1]
        lines[-1] = f"{last} …" if len(last) + 2 <= width else last[: width - 1] + "…"
    return lines


def _fit(widths: list[int], whole: list[bool], budget: int) -> list[int]:
    """Shrink the widest columns first until the table fits the terminal; an id column
    (`whole`) keeps its width, as `resolve` and `label` need the id entire."""
    budget -= 2 * (len(widths) - 1)
    widths = list(widths)
    budget -= sum(w for w, keep in zip(widths, whole, strict=True) if keep)
    shrinkable = [i for i, keep in enumerate(whole) if not keep]
    while shrinkable and sum(widths[i] for i in shrinkable) > budget:
        widest = max(shrinkable, key=lambda i: widths[i])
        if widths[widest] <= MIN_CELL:
            break
        excess = sum(widths[i] for i in shrinkable) - budget
        widths[widest] = max(MIN_CELL, widths[widest] - max(1, excess // 4))
    return widths


def _is_id(column: str) -> bool:
    """A column of ids (`trace_id`, `span_id`, `id`): shown whole, never clipped."""
    name = column.lower()
    return name == "id" or name.endswith(("_id", "_ids"))


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _clip_middle(name: str, width: int) -> str:
    """A column name cut in its middle: names that differ at their end (fire_rate_a,
    fire_rate_b) stay apart."""
    if len(name) <= width:
        return name
    head = (width - 1) // 2
    return name[:head] + "…" + name[len(name) - (width - 1 - head) :]


def _blank(value: Any) -> bool:
    return value is None or value == "" or value == [] or value == {}


def _text(value: Any) -> str:
    """A value as one line for a person: lists and maps as their items, not Python's repr."""
    if value is None:
        return ""
    if isinstance(value, datetime):
        text = value.isoformat(sep=" ", timespec="seconds")
    elif isinstance(value, Mapping):
        text = ", ".join(f"{_text(k)}: {_text(v)}" for k, v in value.items())
    elif isinstance(value, list | tuple):
        text = ", ".join(_text(item) for item in value)
    else:
        text = str(value)
    return terminal_safe(" ".join(text.split()))


def terminal_safe(text: str) -> str:
    """`text` with the characters that would steer a terminal written as escapes."""
    return _STEERING.sub(_escaped, text)


def page_safe(text: str) -> str:
    """`text` for a web page: bidirectional controls, control characters and invisible
    ones written as escapes (`\\u202e`, `\\x1b`), so what an agent wrote shows as it is."""
    return _PAGE_UNSAFE.sub(_escaped, text)


def _escaped(match: regex.Match) -> str:
    return ascii(match.group(0))[1:-1]  # `\x1b`, `\u202e`


def for_spreadsheets(text: str) -> str:
    """A CSV cell a spreadsheet opens as text, not as a formula: one apostrophe before a
    leading `=`, `+`, `-`, `@`, tab or carriage return (and before apostrophes already
    there, so `csv_unescaped` gives back exactly what was written)."""
    return "'" + text if _FORMULA.match(text) else text


def csv_unescaped(text: str) -> str:
    """What `for_spreadsheets` was given."""
    return text[1:] if _FORMULA.match(text) and text.startswith("'") else text


def _csv_cell(value: Any) -> str:
    """A value for a program reading CSV, as it is (whitespace and line breaks kept): lists
    and maps as JSON, times in ISO form, text safe from spreadsheets' formulas."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"  # as DuckDB and JSON write them
    if isinstance(value, Mapping | list | tuple):
        return for_spreadsheets(json.dumps(_plain(value), default=str))
    if isinstance(value, datetime | date):
        return value.isoformat(sep=" ") if isinstance(value, datetime) else value.isoformat()
    if isinstance(value, str):
        return for_spreadsheets(value)
    return str(value)


def _plain(value: Any) -> Any:
    """A value JSON can hold: times in ISO form, durations in seconds, bytes as base64, and
    NaN or infinity (not JSON) as null; anything else DuckDB returns (a UUID) as text."""
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, Decimal):
        value = float(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode()
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, str | int | bool):
        return value
    return str(value)
