"""Per-conversation state for stateful monitors: bounded in memory and expiring.

Monitors judge one trace at a time, but an attack can be spread over five turns sent as five
traces. They keep what they need per conversation here, keyed by `conversation_key`: the
trajectory's conversation id (`gen_ai.conversation.id`, `session.id`, ...), else its trace id.
The store keeps the most recently used `max_entries` conversations and forgets one that was
not touched for `ttl` seconds, so a long-running collector never grows without bound.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

from otel_safety.model import Trajectory

__all__ = ["ExpiringStore", "conversation_key"]

State = TypeVar("State")


def conversation_key(trajectory: Trajectory) -> str:
    """The conversation a trajectory belongs to; a trace on its own is its own conversation."""
    if trajectory.conversation_id:
        return f"conversation:{trajectory.conversation_id}"
    return f"trace:{trajectory.trace_id}"


class ExpiringStore(Generic[State]):
    """An LRU map of per-conversation state whose entries expire `ttl` seconds after last use.

    `get(key, factory)` returns the live state (creating it with `factory`), marks it most
    recently used and drops the least recently used entries beyond `max_entries`, or beyond
    `max_bytes` as `weigh` reckons them (an entry is weighed again each time it is fetched,
    so the budget trails the latest change to one conversation by one turn). Callers mutate
    the returned state under `lock` when several threads share the store.
    """

    def __init__(
        self,
        *,
        ttl: float = 3600.0,
        max_entries: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
        max_bytes: int | None = None,
        weigh: Callable[[State], int] | None = None,
        on_crowded_out: Callable[[str], None] | None = None,
    ) -> None:
        """`on_crowded_out(key)`: called (under the lock) for an entry dropped to make room,
        not for one that expired."""
        if ttl <= 0 or max_entries <= 0 or (max_bytes is not None and max_bytes <= 0):
            raise ValueError("ttl, max_entries and max_bytes must be positive")
        self.ttl = ttl
        self.max_entries = max_entries
        self.max_bytes = max_bytes if weigh is not None else None
        self._weigh = weigh
        self._weights: dict[str, int] = {}
        self.bytes = 0
        self._clock = clock
        self._entries: OrderedDict[str, tuple[float, State]] = OrderedDict()
        self._on_crowded_out = on_crowded_out
        self.lock = threading.RLock()

    def get(self, key: str, factory: Callable[[], State]) -> State:
        with self.lock:
            now = self._clock()
            entry = self._entries.pop(key, None)
            state = entry[1] if entry and now - entry[0] <= self.ttl else factory()
            self._entries[key] = (now, state)  # most recently used last
            if self._weigh is not None:
                weight = self._weigh(state)
                self.bytes += weight - self._weights.get(key, 0)
                self._weights[key] = weight
            self._evict(now)
            return state

    def peek(self, key: str) -> State | None:
        """The live state without touching its age or creating it."""
        with self.lock:
            entry = self._entries.get(key)
            if entry is None or self._clock() - entry[0] > self.ttl:
                return None
            return entry[1]

    def pop(self, key: str) -> State | None:
        """Forget one entry now; its live state, or None when there was none."""
        with self.lock:
            entry = self._entries.pop(key, None)
            self.bytes -= self._weights.pop(key, 0)
            if entry is None or self._clock() - entry[0] > self.ttl:
                return None
            return entry[1]

    def _evict(self, now: float) -> None:
        while len(self._entries) > self.max_entries:
            self._crowd_out()
        while self.max_bytes is not None and self.bytes > self.max_bytes and len(self._entries) > 1:
            self._crowd_out()
        while self._entries:  # expired entries sit at the front: least recently used
            at, _ = next(iter(self._entries.values()))
            if now - at <= self.ttl:
                break
            self._drop_oldest()

    def _crowd_out(self) -> None:
        key = self._drop_oldest()
        if self._on_crowded_out is not None:
            self._on_crowded_out(key)

    def _drop_oldest(self) -> str:
        key, _ = self._entries.popitem(last=False)
        self.bytes -= self._weights.pop(key, 0)
        return key

    def __len__(self) -> int:
        return len(self._entries)
