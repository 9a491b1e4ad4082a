"""A trace's chat spans repeat the conversation so far: each span's `gen_ai.input.messages`
is usually the previous span's array with the newest messages appended. Reading every
history whole makes a run's mapping grow with the square of its length. Within one trace, a
history that extends one already read is parsed only for what it adds; the messages it
shares are the very objects read before, so the trajectory's assembly can skip them too.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from otel_safety.mapping.values import Notes, structured
from otel_safety.model import Message

__all__ = ["ReadHistory", "SharedHistories", "longest_extended"]

# Histories kept to extend: enough for a few agents interleaving their conversations in
# one trace, few enough that looking through them costs nothing.
KEPT = 8

ToMessages = Callable[[list[Any], Notes], list[Message]]


@dataclass(frozen=True)
class ReadHistory:
    """One history as read: its JSON array without the closing bracket, its messages, what
    reading it noted, and the span it was read on."""

    body: str
    messages: list[Message]
    notes: tuple[str, ...]
    capped: tuple[str, ...]
    span_id: str


class SharedHistories:
    """The input histories read so far in one trace (the last `KEPT` of them)."""

    def __init__(self) -> None:
        self._read: deque[ReadHistory] = deque(maxlen=KEPT)

    def read(
        self, text: str, notes: Notes, span_id: str, key: str, to_messages: ToMessages
    ) -> tuple[list[Message], ReadHistory | None] | None:
        """The messages of the JSON array `text`, and the earlier history they extend (None
        when read whole); None when `text` is no readable array, for the caller to read as
        it would alone. Only the elements after the longest earlier history `text` starts
        with are parsed; that reading's notes are noted again, so each span says the same
        as it would have read whole."""
        stripped = text.strip()
        earlier = longest_extended(stripped, self._read)
        own = Notes()
        if earlier is None:
            parsed = _array(stripped, own, key)
        else:
            own.extend(earlier.notes)
            own.capped.extend(earlier.capped)
            rest = stripped[len(earlier.body) :].lstrip()
            parsed = [] if rest == "]" else _array("[" + rest[1:], own, key)
        if parsed is None:
            return None
        messages = to_messages(parsed, own)
        if earlier is not None:
            messages = [*earlier.messages, *messages]
        self._read.append(
            ReadHistory(stripped[:-1], messages, tuple(own), tuple(own.capped), span_id)
        )
        for note in own:
            notes.add(note)
        for note in own.capped:
            if note not in notes.capped:
                notes.capped.append(note)
        return messages, earlier


class _Array(Protocol):
    body: str  # a JSON array's text without its closing bracket


A = TypeVar("A", bound=_Array)


def longest_extended(text: str, earlier: Iterable[A]) -> A | None:
    """Of the `earlier` arrays, the longest that the JSON array `text` continues: the same
    array, or it with more elements after. (Histories of one conversation are each other's
    prefixes: trying the longest first compares one of them, not all.)"""
    for array in sorted(earlier, key=lambda array: len(array.body), reverse=True):
        body = array.body
        if len(text) <= len(body) or not text.startswith(body):
            continue
        rest = text[len(body) :].lstrip()
        if rest == "]" or rest.startswith(","):
            return array
    return None


def _array(text: str, notes: Notes, key: str) -> list[Any] | None:
    parsed = structured(text, notes, key) if text.startswith("[") else None
    return parsed if isinstance(parsed, list) else None
