"""A per-trace memo for pure functions of text: each text is analysed once per trace.

The memo lives only while a trace is judged (`trace_scope`), so it never grows with
traffic and a data file reloaded between traces is always seen. Outside a scope (the
inline guard, a unit test) the functions simply run.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, ParamSpec, TypeVar

__all__ = ["per_trace", "trace_scope"]

P = ParamSpec("P")
R = TypeVar("R")

_MISSING = object()
_scope: ContextVar[dict[Hashable, Any] | None] = ContextVar("otel_safety_trace_memo", default=None)


@contextmanager
def trace_scope() -> Iterator[None]:
    """Memoise `per_trace` functions until the block ends (nested scopes share the outer)."""
    if _scope.get() is not None:
        yield
        return
    token = _scope.set({})
    try:
        yield
    finally:
        _scope.reset(token)


def per_trace(function: Callable[P, R]) -> Callable[P, R]:
    """Mark a pure function of hashable arguments (texts): within a trace scope, each
    distinct call runs once. Its result is shared, so it must not be mutated."""

    @functools.wraps(function)
    def memoised(*args: P.args, **kwargs: P.kwargs) -> R:
        cache = _scope.get()
        if cache is None or kwargs:
            return function(*args, **kwargs)
        key = (function, *args)
        found = cache.get(key, _MISSING)
        if found is _MISSING:
            found = cache[key] = function(*args)
        return found

    return memoised
