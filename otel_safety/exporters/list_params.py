"""Python lists handed to DuckDB as one JSON text each, unnested in SQL.

Why: DuckDB binds a list parameter value by value, and some releases (1.5 among them) try to
import pandas for every value while doing so; without pandas installed each failed import
searches the whole import path. Binding 600 trace ids cost more than the query. One JSON
text per list is one value to bind, read back by `from_json` at C speed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import orjson

__all__ = ["json_lists", "unnested"]


def unnested(name: str, kind: str = "VARCHAR") -> str:
    """SQL for the rows of the list parameter `$name` (bound by `json_lists`), as `kind`."""
    return f"""unnest(from_json(${name}, '["{kind}"]'))"""


def json_lists(lists: Mapping[str, Iterable[Any]]) -> dict[str, str]:
    """Each list as the JSON text `unnested` reads: the parameters to bind."""
    return {name: orjson.dumps(list(values)).decode() for name, values in lists.items()}
