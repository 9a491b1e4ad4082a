"""Arguments bounded for the readers after the mapping: order kept, depth and loops cut."""

from __future__ import annotations

from otel_safety.mapping.values import MAX_JSON_DEPTH, Notes, bounded


def test_keys_keep_their_order_at_every_level() -> None:
    value = {"b": 1, "a": {"z": 1, "y": [{"q": 1, "p": 2}]}, "c": 3}
    copy = bounded(value, Notes(), "arguments")
    assert copy == value
    assert list(copy) == ["b", "a", "c"] and list(copy["a"]) == ["z", "y"]
    assert list(copy["a"]["y"][0]) == ["q", "p"]


def test_a_value_that_contains_itself_is_read_once_and_said() -> None:
    looped: dict = {"command": "ls"}
    looped["again"] = looped
    notes = Notes()
    copy = bounded(looped, notes, "arguments")
    assert copy["command"] == "ls"
    assert any("contains itself" in note for note in notes.capped)
    depth, node = 0, copy
    while isinstance(node, dict) and "again" in node:
        node, depth = node["again"], depth + 1
    assert depth <= MAX_JSON_DEPTH


def test_bytes_are_read_as_text_and_long_text_kept_when_asked() -> None:
    notes = Notes()
    copy = bounded({"command": b"rm -rf \xff", "long": "x" * 70_000}, notes, "a", cap_text=False)
    assert copy["command"] == "rm -rf \ufffd" and len(copy["long"]) == 70_000
    assert any("invalid UTF-8" in note for note in notes)
