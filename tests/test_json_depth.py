"""Cutting values nested too deep out of JSON text, so the rest of a line can be read."""

from __future__ import annotations

import json
from pathlib import Path

from otel_safety.json_depth import cut_deep_values
from otel_safety.otlp import read_otlp_json


def test_a_shallow_text_is_left_as_it_was() -> None:
    text = '{"a": [1, {"b": "x[{y"}], "c": "quote \\" [ and { inside"}'
    assert cut_deep_values(text, max_depth=3) == (text, 0)


def test_each_container_past_the_depth_becomes_null_and_brackets_in_strings_do_not_count() -> None:
    text = '{"a": [[["deep", "]"]], [["also"]]], "b": "[[[[", "c": {"d": {}}}'
    cut, count = cut_deep_values(text, max_depth=2)
    assert count == 3
    assert json.loads(cut) == {"a": [None, None], "b": "[[[[", "c": {"d": None}}


def test_a_thousand_levels_deep_parse_once_cut() -> None:
    text = '{"keep": 1, "deep": ' + "[" * 5000 + "]" * 5000 + "}"
    cut, count = cut_deep_values(text)
    assert count == 1 and json.loads(cut)["keep"] == 1


def test_an_unclosed_text_is_left_to_the_parser() -> None:
    text = "[" * 200
    assert cut_deep_values(text, max_depth=10) == (text, 0)


def _span(number: int, name: str, attributes: list | None = None) -> dict:
    return {
        "traceId": "0af7651916cd43dd8448eb211c80319c",
        "spanId": f"{number:016x}",
        "name": name,
        "startTimeUnixNano": "1",
        "endTimeUnixNano": "2",
        "attributes": attributes or [],
    }


def test_one_value_nested_a_thousand_deep_costs_its_attribute_not_the_line(tmp_path: Path) -> None:
    spans = [_span(1, "good"), _span(2, "deep", [{"key": "a", "value": "DEEP"}]), _span(3, "also")]
    document = {"resourceSpans": [{"scopeSpans": [{"scope": {"name": "x"}, "spans": spans}]}]}
    levels = 300  # each level is four JSON containers: too deep for json to encode or read
    deep = '{"kvlistValue": {"values": [{"key": "k", "value": ' * levels
    deep += '{"stringValue": "bottom"}' + "}]}}" * levels
    text = json.dumps(document).replace('"DEEP"', deep)
    path = tmp_path / "traces.jsonl"
    path.write_text(text + "\n", encoding="utf-8")
    [batch] = list(read_otlp_json(path))
    assert sorted(span.name for span in batch.spans) == ["also", "deep", "good"]
    assert not [span for span in batch.spans if span.attributes]
    assert batch.error is not None and len(batch.error) < 600
    assert "nested deeper than 100 levels cut" in batch.error
    assert "scopeSpans[0].spans[1]: attribute 'a' dropped" in batch.error
