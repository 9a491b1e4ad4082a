"""Long-running commands stop on SIGTERM or Ctrl-C without taking a lock in the handler."""

from __future__ import annotations

import os
import signal
import threading

from otel_safety.commands.stopping import StopSignals


def test_a_stop_signal_ends_the_wait_with_its_number():
    previous = signal.getsignal(signal.SIGUSR1)
    try:
        stop = StopSignals((signal.SIGUSR1,))
        sender = threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGUSR1))
        sender.start()
        assert stop.wait(poll=0.01) == signal.SIGUSR1
        sender.join()
    finally:
        signal.signal(signal.SIGUSR1, previous)


def test_a_stop_that_came_before_the_wait_still_counts():
    previous = signal.getsignal(signal.SIGUSR1)
    try:
        stop = StopSignals((signal.SIGUSR1,))
        os.kill(os.getpid(), signal.SIGUSR1)  # while the command would still be starting
        assert stop.received == [signal.SIGUSR1]
        assert stop.wait() == signal.SIGUSR1
    finally:
        signal.signal(signal.SIGUSR1, previous)
