"""A tool call's arguments in one shape, whichever way a framework recorded them: a dict
when they are, or decode to, a JSON object (read flat when the parser cannot take it: nested
past its limit, cut short, in Python's quotes); otherwise the text as given."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pydantic_core import to_jsonable_python

from otel_safety.json_flat import lenient_loads, read_flat

_PLAIN = (str, bytes, bytearray, int, float, bool, type(None), Mapping, list, tuple)

__all__ = ["plain_arguments", "tool_arguments"]


def tool_arguments(value: Any) -> dict[str, Any] | str | None:
    """Arguments in the model's shape: a dict whenever they are, or decode to, a JSON object."""
    if value is None or isinstance(value, dict):
        return value
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, str):
        if value.lstrip().startswith("{"):
            try:
                decoded = json.loads(value)
            except RecursionError:
                return read_flat(value)
            except ValueError:
                decoded = lenient_loads(value)
                if decoded is None:
                    return read_flat(value, named_only=True) or value
            if isinstance(decoded, dict):
                return decoded
        return value
    return json.dumps(value, default=str)


def plain_arguments(value: Any) -> Any:
    """Arguments handed over as an object (a pydantic model, a dataclass, a set) as the JSON
    values it holds; any other object as its text. A check that read nothing of them would
    allow `Command(line="rm -rf /")` unread."""
    if isinstance(value, _PLAIN):
        return value
    try:
        return to_jsonable_python(value, fallback=str)
    except (ValueError, TypeError, RecursionError):  # a cycle, a depth pydantic refuses
        return str(value)
