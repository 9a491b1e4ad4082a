"""What every store sink does alike: collect evaluated traces, write them in batches at most
once per interval, keep a failed batch to retry, and never hold more than `max_pending`.

A store that cannot be written (a file another process holds, a catalog that went away)
must not grow the observed application's memory without end: beyond `max_pending` the
oldest traces are dropped, with an error in the log saying how many.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

from otel_safety.pipeline import TraceEvaluation
from otel_safety.rate_limited import RateLimitedLog

logger = logging.getLogger(__name__)

# Seconds a flush waits on a store it cannot write before it says what it waits for.
_QUIET_WAIT = 2.0

WARNING_EVERY = 10.0  # seconds between two warnings about the same unwritable store


class BatchingSink:
    """Base of the DuckDB file and DuckLake sinks; subclasses implement `_store` and
    `_close`, and name the exceptions that mean "try again later" in `retry_on`."""

    retry_on: tuple[type[BaseException], ...] = ()
    flush_poll = 0.05  # seconds between two attempts while force_flush waits

    def __init__(self, where: str, *, write_interval: float, max_pending: int) -> None:
        self.where = where
        self.write_interval = write_interval
        self.max_pending = max_pending
        self._lock = threading.Lock()
        self._pending: list[TraceEvaluation] = []
        self._last_write = 0.0
        self._retry_warnings = RateLimitedLog(logger, window=WARNING_EVERY)
        self._drop_errors = RateLimitedLog(logger, window=WARNING_EVERY)
        # False when a write-ahead spool holds every trace and the receiver stops taking new
        # ones while the store is backlogged: then nothing is dropped from memory.
        self.drop_overflow = True
        self.dropped = 0  # traces given up on while the store could not be written
        self.rejected = 0  # traces the store refused even one by one (bad values)
        self._flush_gave_up = False  # the last force_flush ran out of time: the file is held
        self.failing: str | None = None  # why the last write failed; None once one succeeds
        self._said_failing = False  # a warning said so (a first lock conflict is not said)
        # Told of every batch once it is in the store (a write-ahead spool releases it).
        self.on_written: list[Callable[[Sequence[TraceEvaluation]], None]] = []

    def after_fork(self) -> None:
        """In a forked copy of the application: the traces waiting are the parent's to
        write, and a connection open in the parent is not this process's to use."""
        self._lock = threading.Lock()
        self._pending = []
        self._forget_connection()

    def _forget_connection(self) -> None:
        """Subclasses drop (never close) a connection inherited from the parent."""

    def write(self, evaluations: Sequence[TraceEvaluation]) -> None:
        with self._lock:
            self._pending.extend(evaluations)
            overflow = len(self._pending) - self.max_pending
            if overflow > 0 and self.drop_overflow:
                del self._pending[:overflow]
                self._drop(overflow)
            due = time.monotonic() - self._last_write >= self.write_interval
            if self._pending and (due or len(self._pending) >= self.max_pending // 2):
                self._write_pending()

    @property
    def waiting(self) -> int:
        """Traces judged and not yet in the store."""
        with self._lock:
            return len(self._pending)

    @property
    def backlogged(self) -> bool:
        """As many traces wait for the store as it may hold: take no new work."""
        return len(self._pending) >= self.max_pending

    def tick(self) -> None:
        """Called by the engine when idle, so the last traces do not wait for more traffic."""
        self.write(())

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        started = time.monotonic()
        deadline = started + timeout_millis / 1000
        said = False
        while True:
            with self._lock:
                if self._write_pending():
                    self._flush_gave_up = False
                    return True
                waiting = len(self._pending)
            now = time.monotonic()
            if now >= deadline:
                self._flush_gave_up = True
                return False
            if not said and now - started >= _QUIET_WAIT and deadline - now >= 1:
                said = True  # a silent wait reads as a hung app (at exit, say)
                logger.warning(
                    "otel-safety store %s cannot be written now; waiting up to %.0f s more "
                    "to write %d trace(s) (Ctrl-C gives them up)",
                    self.where,
                    deadline - now,
                    waiting,
                )
            time.sleep(self.flush_poll)

    def shutdown(self) -> None:
        if self._flush_gave_up:  # the engine's shutdown waited its time already: one more
            with self._lock:  # try, not another 30 s (an app took a minute to exit)
                self._write_pending()
        else:
            self.force_flush()
        with self._lock:
            if self._pending or self.dropped or self.rejected:
                logger.error(
                    "otel-safety store %s: %d traces were not written: %d still waiting at "
                    "shutdown, %d dropped while the store could not be written, %d refused",
                    self.where,
                    len(self._pending) + self.dropped + self.rejected,
                    len(self._pending),
                    self.dropped,
                    self.rejected,
                )
            self._close()

    def _write_pending(self) -> bool:
        """Write what is pending; False (and keep it for the next try) when the store
        cannot be written right now."""
        if not self._pending:
            return True
        self._last_write = time.monotonic()
        written = list(self._pending)
        try:
            self._store(written)
        except self.retry_on as exc:
            self._warn(exc)
            self.failing = str(exc) or type(exc).__name__
            return False
        if self.failing is not None and self._said_failing:
            logger.warning("otel-safety store %s is written again", self.where)
        self.failing, self._said_failing = None, False
        self._pending.clear()
        for listener in self.on_written:
            listener(written)
        return True

    def _drop(self, count: int) -> None:
        self.dropped += count
        self._drop_errors.error(
            "otel-safety store %s cannot be written: %d traces dropped so far, the "
            "oldest first (max_pending %d)",
            self.where,
            self.dropped,
            self.max_pending,
        )

    def _warn(self, exc: BaseException) -> None:
        if self.failing is None and "lock" in str(exc).lower():
            # Writers of one store take turns: a first lock conflict is the usual wait for
            # the other's write, and is only said (as a warning) when the next try fails too.
            logger.debug("otel-safety store %s held by another writer; retrying", self.where)
            return
        self._said_failing = True
        self._retry_warnings.warning(
            "otel-safety store %s: %s; keeping %d trace(s) to retry",
            self.where,
            exc,
            len(self._pending),
        )

    def _store(self, evaluations: Sequence[TraceEvaluation]) -> None:
        raise NotImplementedError

    def _close(self) -> None:
        raise NotImplementedError
