"""A content memo for pure functions of text: each text is analysed once, not once per trace.

Traces repeat texts: every trace of an app carries its system prompt and tool definitions,
and each turn's trace repeats the conversation so far. The memo keeps analyses across traces,
bounded: two generations of at most `capacity` characters of analysed text each (a lookup
promotes an entry from the old generation; when the young one fills, the old one is dropped),
so it never grows with traffic. Capacity 0 keeps analyses for one trace only.

What a memoised function reads besides its arguments (the detector data folder and extra
taxonomy in force) is a registered `depends_on` source: each judging scope reads the sources
once, and a changed value starts a memo of its own, so a data folder set between traces is
always seen. Only judging scopes (`trace_scope`) use the memo;
outside one (the inline guard, a unit test) the functions simply run.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, ParamSpec, TypeVar

__all__ = [
    "DEFAULT_CAPACITY",
    "MISSING",
    "content_memo",
    "depends_on",
    "in_scope",
    "set_capacity",
    "trace_scope",
]

P = ParamSpec("P")
R = TypeVar("R")

DEFAULT_CAPACITY = 4_000_000  # characters of text per generation
ENTRY_WEIGHT = 64  # what an entry costs beside its text, in characters
_TEXTS = (str, bytes)
_MISSING = object()
_KEPT_STATES = 2  # memos kept at once, one per data folder in force


class _Memo:
    """Two generations of results: `young` takes every new entry and hits; `old` is what
    young held when it last filled. Entries are weighed by the text they were asked of
    (results are about as large), plus a fixed cost for the entry itself."""

    __slots__ = ("capacity", "old", "weight", "young")

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.weight = 0
        self.young: dict[Hashable, Any] = {}
        self.old: dict[Hashable, Any] = {}

    def promote(self, key: tuple[Any, ...]) -> Any:
        """The result from the old generation (moved to the young one), or _MISSING."""
        found = self.old.pop(key, _MISSING)
        if found is not _MISSING:
            self.store(key, found)
        return found

    def store(self, key: tuple[Any, ...], value: Any) -> None:
        self.young[key] = value
        self.weight += ENTRY_WEIGHT + sum(len(a) for a in key if type(a) in _TEXTS)
        if self.weight > self.capacity:  # races lose entries, never results
            self.old, self.young, self.weight = self.young, {}, 0


_scope: ContextVar[_Memo | None] = ContextVar("otel_safety_content_memo", default=None)
# The sources' values as the judging scope in force read them at its start.
_scope_sources: ContextVar[dict[Callable[[], Hashable], Hashable] | None] = ContextVar(
    "otel_safety_scope_sources", default=None
)
_sources: list[Callable[[], Hashable]] = []
_memos: dict[tuple[Hashable, ...], _Memo] = {}
_lock = threading.Lock()
_capacity = DEFAULT_CAPACITY


def depends_on(source: Callable[[], Hashable]) -> None:
    """Register state that memoised functions read besides their arguments: results found
    under one value of it are never served under another."""
    _sources.append(source)


def set_capacity(characters: int) -> None:
    """Characters of analysed text per generation from now on (0: one trace's analyses
    only); drops the memo."""
    global _capacity
    if characters < 0:
        raise ValueError(f"analysis cache size must be >= 0, not {characters}")
    with _lock:
        _capacity = characters
        _memos.clear()


def in_scope(source: Callable[[], Hashable]) -> Any:
    """The value `source` had when the judging scope in force began, or MISSING outside
    one: a source is read once per scope, not at every memoised call that needs it."""
    found = _scope_sources.get()
    return _MISSING if found is None else found.get(source, _MISSING)


MISSING = _MISSING


def _memo_for_now(state: tuple[Hashable, ...]) -> _Memo:
    if _capacity == 0:
        return _Memo(1 << 62)  # this trace's own, dropped when its scope ends
    with _lock:
        memo = _memos.get(state)
        if memo is None:
            while len(_memos) >= _KEPT_STATES:
                del _memos[next(iter(_memos))]
            memo = _memos[state] = _Memo(_capacity)
        return memo


@contextmanager
def trace_scope() -> Iterator[None]:
    """Memoise `content_memo` functions until the block ends (nested scopes share the
    outer)."""
    if _scope.get() is not None:
        yield
        return
    state = tuple(source() for source in _sources)
    sources_token = _scope_sources.set(dict(zip(_sources, state, strict=True)))
    token = _scope.set(_memo_for_now(state))
    try:
        yield
    finally:
        _scope.reset(token)
        _scope_sources.reset(sources_token)


def content_memo(function: Callable[P, R]) -> Callable[P, R]:
    """Mark a pure function of hashable arguments (texts): within judging scopes, each
    distinct call runs once while the memo holds it. Its result is shared, so it must not be
    mutated, and anything else it reads must be a `depends_on` source."""

    @functools.wraps(function)
    def memoised(*args: P.args, **kwargs: P.kwargs) -> R:
        memo = _scope.get()
        if memo is None or kwargs:
            return function(*args, **kwargs)
        key = (function, *args)
        found = memo.young.get(key, _MISSING)
        if found is _MISSING:
            found = memo.promote(key)
            if found is _MISSING:
                found = function(*args)
                memo.store(key, found)
        return found

    return memoised
