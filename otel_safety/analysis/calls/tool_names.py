"""Tool names as detectors read them: snake_case words, matched a whole word at a time.

Frameworks spell one tool "sendEmail", "send-email" or "mcp__mail__SendEmail"; every name
is normalised to snake_case first, and data files list name words ("send", "email") that
must cover whole `_`-separated words, so "send" names "send_email" but not "resend".
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any

import regex

from otel_safety.analysis import linear
from otel_safety.analysis.pattern_cache import compiled

__all__ = ["first_match_at", "name_pattern", "normalize_name", "remembered"]

NAME_MEMO = 4096  # tool names remembered per memo

_CAMEL_LOWER = compiled(r"([a-z0-9])([A-Z])")
_CAMEL_UPPER = linear.compile(r"([A-Z]+)([A-Z][a-z])")  # RE2: linear on ASCII
_NON_WORD = compiled(r"[^A-Za-z0-9]+")


@functools.lru_cache(maxsize=4096)
def normalize_name(name: str) -> str:
    """snake_case a tool or argument name: "HTTPPost" -> "http_post", "a__b-c" -> "a_b_c"."""
    name = _CAMEL_LOWER.sub(r"\1_\2", name)
    name = _CAMEL_UPPER.sub(r"\1_\2", name)
    return _NON_WORD.sub("_", name).strip("_").lower()


def name_pattern(entry: str) -> str:
    """A pattern for `entry` as whole `_`-separated words of a normalised name."""
    return f"(?:^|_)(?:{entry})(?=_|$)"


def first_match_at(patterns: Iterable[regex.Pattern], name: str) -> int | None:
    """Where in `name` the leftmost match of any of `patterns` starts, if one matches: the
    leftmost verb of a name says what the tool does ("get_calendar_events" reads)."""
    return min((m.start() for p in patterns if (m := p.search(name))), default=None)


def remembered(memo: dict[str, Any], name: str, make: Callable[[str], Any]) -> Any:
    """`make(name)`, worked out once per memo; tool names come from traces, so a full memo
    starts over rather than grow."""
    found = memo.get(name, memo)
    if found is memo:
        if len(memo) >= NAME_MEMO:
            memo.clear()
        found = memo[name] = make(name)
    return found
