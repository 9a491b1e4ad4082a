"""Waiting for SIGTERM or Ctrl-C in a command that runs until it is stopped.

A signal handler must take no lock: `threading.Event.set` takes the event's own lock, which
the main thread may hold inside `Event.wait` at the moment the signal lands, and then neither
goes on. And a main thread blocked on a lock is not woken by a signal that another thread
took. So the handler only notes the signal, and the main thread looks a few times a second.

A second signal while the first one's orderly stop runs is someone who will not wait: with
`force`, the process then exits at once, after `force` has said what that leaves behind.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from types import FrameType

__all__ = ["StopSignals"]


class StopSignals:
    """Installed at once: a stop that arrives while the command is still starting counts."""

    def __init__(
        self,
        signals: tuple[int, ...] = (signal.SIGTERM, signal.SIGINT),
        force: Callable[[], str] | None = None,
    ) -> None:
        self.received: list[int] = []  # appending takes no lock a handler could wait on
        self._force = force  # the line printed before a second signal's exit
        for signum in signals:
            signal.signal(signum, self._note)

    def _note(self, signum: int, _frame: FrameType | None) -> None:
        self.received.append(signum)
        if self._force is not None and len(self.received) > 1:
            # os.write, not print: the main thread may be inside print's buffer right now.
            os.write(2, (self._force() + "\n").encode(errors="replace"))
            os._exit(128 + signum)

    def wait(self, poll: float = 0.2) -> int:
        """Block until a stop signal came; its number."""
        while not self.received:
            time.sleep(poll)
        return self.received[0]
