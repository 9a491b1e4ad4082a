"""A base for engine sinks that hold nothing back, so each need not spell out three no-ops."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["ImmediateSink"]


class ImmediateSink:
    """A sink (see `engine.Sink`) whose `write` does all its work at once: nothing is held
    back to tick out, flush or release."""

    def write(self, evaluations: Sequence[Any]) -> None:
        raise NotImplementedError

    def tick(self) -> None:
        """Nothing is held back."""

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True

    def shutdown(self) -> None:
        """Nothing to release."""
