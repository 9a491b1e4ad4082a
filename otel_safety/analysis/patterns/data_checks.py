"""Checks on the plain values of detector data files: keys, weights, lists of strings.

The rule tables of several detectors share field shapes (a weight in (0, 1], a list of
non-empty strings, a fixed set of keys); checking them one way keeps what counts as valid
the same in every file. Each check either answers yes or no, so the caller words its own
error, or raises a ValueError that starts with `where`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = [
    "check_keys",
    "check_weight",
    "is_number",
    "is_string_list",
    "is_weight",
    "string_list",
]


def is_number(value: Any) -> bool:
    """An int or float; TOML's `true` is a bool, which Python would count as 1."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def is_weight(value: Any) -> bool:
    """A number in (0, 1]: how much one rule counts on its own."""
    return is_number(value) and 0 < value <= 1


def check_weight(value: Any, where: str) -> float:
    """`value` as a weight, or a ValueError naming `where`."""
    if not is_weight(value):
        raise ValueError(f"{where}: weight must be a number in (0, 1]")
    return float(value)


def is_string_list(value: Any) -> bool:
    """A list whose entries are all non-empty strings (an empty list qualifies)."""
    return isinstance(value, list) and all(isinstance(entry, str) and entry for entry in value)


def string_list(value: Any, where: str) -> list[str]:
    """`value` as a list of non-empty strings, or a ValueError naming `where`."""
    if not is_string_list(value):
        raise ValueError(f"{where}: expected a list of non-empty strings")
    return list(value)


def check_keys(table: Mapping[str, Any], known: Iterable[str], where: str) -> None:
    """A ValueError naming `where` when `table` has keys outside `known` (a typo would
    otherwise be silently ignored)."""
    unknown = sorted(set(table) - set(known))
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {', '.join(unknown)}")
