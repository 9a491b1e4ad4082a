"""A JSON text read flat, in one linear pass: every scalar keyed by the name just before it.

For the texts a tool call's arguments arrive as that the JSON parser cannot take: nested past
its recursion limit (a model can write 1,000 brackets), cut short (`{"command": "rm -rf /"`),
or written with Python's quotes (`{'command': 'rm -rf /'}`). Their nesting is lost, their
values are not: a guard that read nothing would let `rm -rf /` through.
"""

from __future__ import annotations

import json
from typing import Any

from otel_safety.analysis.pattern_cache import compiled

__all__ = ["add_numbered", "lenient_loads", "read_flat"]

# One token, left to right: a string in either quotes, a punctuation mark, a bare scalar.
_TOKEN = compiled(r'"(?:[^"\\]|\\.)*+"|\'(?:[^\'\\]|\\.)*+\'|[:,\[\]{}]|[^\s":,\[\]{}]++')
_PUNCTUATION = frozenset(":,[]{}")


def lenient_loads(text: str) -> Any:
    """JSON whose strings hold raw control characters (a newline between two commands, a
    tab, a NUL), as the lenient parsers many agent runtimes call take it: `{"command":
    "ls<newline>rm -rf /"}` runs both lines. None when it is malformed otherwise."""
    try:
        return json.loads(text, strict=False)
    except (ValueError, RecursionError):
        return None


def read_flat(text: str, *, named_only: bool = False) -> dict[str, Any]:
    """Each scalar of `text` keyed by the name before it (`value` before any; `name#2` for a
    repeat). `named_only`: scalars before the first name are left out, so that text which
    is not JSON at all ("{not json") reads as nothing rather than as its last word."""
    flat: dict[str, Any] = {}
    seen: dict[str, int] = {}
    name: str | None = None if named_only else "value"
    previous: str | None = None
    for token in _TOKEN.finditer(text):
        piece = token.group()
        if piece == ":" and previous is not None and previous[0] in "\"'":
            name = str(_scalar(previous))
        elif piece in ",]}" and _is_scalar(previous) and name is not None:
            add_numbered(flat, seen, name, _scalar(previous))  # type: ignore[arg-type]
        previous = piece
    if _is_scalar(previous) and name is not None:  # a text cut short ends on its last value
        add_numbered(flat, seen, name, _scalar(previous))  # type: ignore[arg-type]
    return flat


def _is_scalar(token: str | None) -> bool:
    return token is not None and token not in _PUNCTUATION


def _scalar(token: str) -> Any:
    if token[0] == "'" and len(token) > 1 and token[-1] == "'":
        return token[1:-1].replace("\\'", "'")
    try:
        return json.loads(token)
    except ValueError:
        return token


def add_numbered(flat: dict[str, Any], seen: dict[str, int], name: str, value: Any) -> None:
    """`flat[name] = value`, or `name#N` for the Nth value of that name."""
    seen[name] = seen.get(name, 0) + 1
    flat[name if seen[name] == 1 else f"{name}#{seen[name]}"] = value
