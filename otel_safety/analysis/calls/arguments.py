"""A tool call's arguments in one shape, whichever way a framework recorded them: a dict
when they are, or decode to, a JSON object; otherwise the text as given."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

__all__ = ["tool_arguments"]


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
            except ValueError:
                return value
            if isinstance(decoded, dict):
                return decoded
        return value
    return json.dumps(value, default=str)
