"""One log line per problem, but at most `limit` lines every `window` seconds.

A full queue, a dead endpoint or a hostile client can cause the same problem thousands of
times a second; the log must stay readable and writing it must stay cheap. The engine, the
span batcher, the deep tier, the store batcher and `serve`'s receivers all log through this.
Every occurrence is counted where it happens (stats, metrics); the log only samples.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

__all__ = ["RateLimitedLog"]


class RateLimitedLog:
    """Logs to `logger`; lines beyond `limit` in one `window` are suppressed.

    With `report_suppressed`, the first line of the next window is preceded by one saying how
    many were left out (for messages that do not carry a running count themselves).
    """

    def __init__(
        self,
        logger: logging.Logger,
        *,
        window: float = 10.0,
        limit: int = 1,
        report_suppressed: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logger = logger
        self.window = window
        self.limit = limit
        self.report_suppressed = report_suppressed
        self._clock = clock
        self._lock = threading.Lock()
        self._start: float | None = None  # None: the first line is always logged
        self._used = 0
        self.suppressed = 0  # lines left out in the current window

    def warning(self, message: str, *args: object) -> bool:
        return self.log(logging.WARNING, message, *args)

    def error(self, message: str, *args: object, exc_info: bool = False) -> bool:
        return self.log(logging.ERROR, message, *args, exc_info=exc_info)

    def log(self, level: int, message: str, *args: object, exc_info: bool = False) -> bool:
        """Log unless this window's budget is spent; whether the line was written."""
        with self._lock:
            now = self._clock()
            if self._start is None or now - self._start >= self.window:
                if self.suppressed and self.report_suppressed:
                    self.logger.log(
                        level,
                        "%d more such problems in the last %gs were not logged",
                        self.suppressed,
                        self.window,
                    )
                self._start, self._used, self.suppressed = now, 0, 0
            if self._used >= self.limit:
                self.suppressed += 1
                return False
            self._used += 1
        self.logger.log(level, message, *args, exc_info=exc_info)
        return True
