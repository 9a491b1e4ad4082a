"""Per-conversation monitor state: keyed by conversation, bounded, expiring."""

from __future__ import annotations

import pytest

from otel_safety.conversation import ExpiringStore, conversation_key
from otel_safety.model import Trajectory


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_traces_of_one_conversation_share_a_key_and_a_lone_trace_is_its_own() -> None:
    a = Trajectory(trace_id="a" * 32, conversation_id="c1")
    b = Trajectory(trace_id="b" * 32, conversation_id="c1")
    lone = Trajectory(trace_id="c" * 32)
    assert conversation_key(a) == conversation_key(b) == "conversation:c1"
    assert conversation_key(lone) == "trace:" + "c" * 32


def test_state_is_kept_per_key_and_the_least_recently_used_is_dropped() -> None:
    store: ExpiringStore[list[int]] = ExpiringStore(max_entries=2)
    store.get("one", list).append(1)
    store.get("two", list).append(2)
    store.get("one", list).append(11)  # "one" is now the most recently used
    store.get("three", list)
    assert len(store) == 2
    assert store.peek("two") is None
    assert store.peek("one") == [1, 11]


def test_state_expires_after_ttl_without_use() -> None:
    clock = Clock()
    store: ExpiringStore[list[int]] = ExpiringStore(ttl=10, clock=clock)
    store.get("c", list).append(1)
    clock.now = 9
    assert store.get("c", list) == [1]  # touching it renews it
    clock.now = 18
    assert store.peek("c") == [1]
    clock.now = 30
    assert store.peek("c") is None
    assert store.get("c", list) == []
    store.get("other", list)
    clock.now = 45
    store.get("new", list)  # expired entries are swept when others are used
    assert len(store) == 1


@pytest.mark.parametrize("kwargs", [{"ttl": 0}, {"max_entries": 0}])
def test_bounds_must_be_positive(kwargs: dict) -> None:
    with pytest.raises(ValueError, match="positive"):
        ExpiringStore(**kwargs)


def test_the_store_holds_a_byte_budget_as_well_as_a_count():
    """Conversations that grow big push the least recently used ones out."""
    from otel_safety.conversation import ExpiringStore

    store: ExpiringStore[list[str]] = ExpiringStore(
        max_entries=100, max_bytes=10_000, weigh=lambda texts: sum(map(len, texts))
    )
    for number in range(10):
        store.get(f"c{number}", list).append("x" * 3_000)
        store.get(f"c{number}", list)  # fetched again: weighed with what was added
    assert store.bytes <= 10_000
    assert len(store) == 3 and store.peek("c9") is not None and store.peek("c0") is None
