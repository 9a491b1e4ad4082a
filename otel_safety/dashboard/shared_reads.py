"""One store read for every open tab that asks for the same panel.

Each tab refreshes every panel every few seconds. Reading the store once per tab made the
panels slower with every tab (the reads take turns) and held the file the writers need for
as long. A read asked for while the same one runs, or shortly after it, gets its answer; an
action (a resolution, an approval's answer) forgets every answer so far, so the page that
made it shows it at once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Hashable
from typing import Any

MAX_KEPT = 256  # answers kept at most: a key holds a trace id or the audit filters


class SharedReads:
    """Answers keyed by what was read, each kept `fresh_for` seconds from when its read began."""

    def __init__(self, fresh_for: float) -> None:
        self.fresh_for = fresh_for
        self._kept: dict[Hashable, tuple[float, Any]] = {}
        self._running: dict[Hashable, asyncio.Task[Any]] = {}
        self._generation = 0

    async def get(self, key: Hashable, read: Callable[[], Awaitable[Any]]) -> Any:
        kept = self._kept.get(key)
        if kept is not None and time.monotonic() - kept[0] < self.fresh_for:
            return kept[1]
        running = self._running.get(key)
        if running is None:
            running = asyncio.ensure_future(self._read(key, read, self._generation))
            running.add_done_callback(_retrieve)
            self._running[key] = running
        # A tab that goes away must not cancel the read the other tabs wait for.
        return await asyncio.shield(running)

    def forget(self) -> None:
        """After an action: every later request reads the store anew."""
        self._generation += 1
        self._kept.clear()
        self._running.clear()

    async def _read(
        self, key: Hashable, read: Callable[[], Awaitable[Any]], generation: int
    ) -> Any:
        began = time.monotonic()
        try:
            value = await read()
        finally:
            if self._running.get(key) is asyncio.current_task():
                del self._running[key]
        if generation == self._generation:  # begun before an action: not kept
            self._keep(key, began, value)
        return value

    def _keep(self, key: Hashable, began: float, value: Any) -> None:
        if len(self._kept) >= MAX_KEPT:
            now = time.monotonic()
            self._kept = {
                k: kept for k, kept in self._kept.items() if now - kept[0] < self.fresh_for
            }
            if len(self._kept) >= MAX_KEPT:
                self._kept.pop(next(iter(self._kept)))
        self._kept[key] = (began, value)


def _retrieve(task: asyncio.Task[Any]) -> None:
    """A failed read whose every asker has gone is not reported as never retrieved."""
    if not task.cancelled():
        task.exception()
