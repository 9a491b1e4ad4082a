"""Attributes of an OTLP/JSON file that protobuf would drop or refuse, made readable or named.

A hand-written or converted trace file may give an attribute's value as a bare JSON value
(`"value": "rm -rf /"`) instead of an AnyValue object (`{"stringValue": "rm -rf /"}`):
protobuf's reader then drops the attribute without a word, and the span is judged without it.
Or one value is malformed (`{"intValue": "notanumber"}`), and protobuf refuses the whole span
for it. A file reader repairs both before decoding: a bare value is read as the AnyValue of
its type, a malformed one is dropped alone, and each is named in the line's problems. Only
documents the direct reader found unusual come here, so well-formed files pay nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from google.protobuf import json_format
from opentelemetry.proto.common.v1.common_pb2 import KeyValue

from otel_safety.otlp import field_path

__all__ = ["repair_attributes"]

# The AnyValue member a bare JSON value stands for (bool before int: True is an int too).
_BARE_KINDS: tuple[tuple[type, str], ...] = (
    (str, "stringValue"),
    (bool, "boolValue"),
    (int, "intValue"),
    (float, "doubleValue"),
)


def repair_attributes(document: dict[str, Any], problems: list[str]) -> bool:
    """Repair, in place, every attribute list of a (copied) OTLP/JSON trace request; True
    when something was changed, each change named in `problems`."""
    changed = False
    for where, holder in _attribute_holders(document):
        pairs = holder.get("attributes")
        if not isinstance(pairs, list):
            continue
        kept = []
        for pair in pairs:
            repaired = _repaired(pair, where, problems)
            if repaired is not pair:
                changed = True
            if repaired is not None:
                kept.append(repaired)
        holder["attributes"] = kept
    return changed


def _repaired(pair: Any, where: str, problems: list[str]) -> Any:
    """The pair as protobuf can read it: itself, a copy with its bare value wrapped, or None
    (dropped, and named)."""
    if not isinstance(pair, dict) or "value" not in pair:
        return pair
    key, value = pair.get("key"), pair["value"]
    for kind, member in _BARE_KINDS:
        if isinstance(value, kind):
            problems.append(
                f"{where}: attribute {key!r} is a bare {_json_name(value)}, not an AnyValue "
                f'object ({{"{member}": ...}}); read as one'
            )
            return {**pair, "value": {member: value}}
    if value is None:  # an empty AnyValue: nothing to read, nothing lost
        return pair
    reason = _reason(pair) if isinstance(value, dict) else "a list, not an AnyValue object"
    if not reason:
        return pair
    problems.append(f"{where}: attribute {key!r} dropped: {reason}")
    return None


def _reason(pair: dict[str, Any]) -> str:
    """Why protobuf refuses the pair, or "" when it reads it."""
    try:
        json_format.ParseDict(pair, KeyValue(), ignore_unknown_fields=True)
    except (json_format.ParseError, TypeError, ValueError, OverflowError, RecursionError) as exc:
        return field_path(str(exc) or type(exc).__name__).removeprefix("value.")
    return ""


def _json_name(value: Any) -> str:
    if isinstance(value, str):
        return "string"
    return "boolean" if isinstance(value, bool) else "number"


def _attribute_holders(document: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(where, object with an `attributes` list) for the resource, scope, spans, events and
    links of every block, named as the file reader names places."""
    blocks = _items(document, "resourceSpans", "resource_spans")
    for i, block in enumerate(blocks):
        if not isinstance(block, dict):
            continue
        if isinstance(block.get("resource"), dict):
            yield f"resourceSpans[{i}].resource", block["resource"]
        for j, scope in enumerate(_items(block, "scopeSpans", "scope_spans")):
            if not isinstance(scope, dict):
                continue
            where = f"resourceSpans[{i}].scopeSpans[{j}]"
            if isinstance(scope.get("scope"), dict):
                yield f"{where}.scope", scope["scope"]
            for k, span in enumerate(_items(scope, "spans")):
                if not isinstance(span, dict):
                    continue
                yield f"{where}.spans[{k}]", span
                for name in ("events", "links"):
                    for n, item in enumerate(_items(span, name)):
                        if isinstance(item, dict):
                            yield f"{where}.spans[{k}].{name}[{n}]", item


def _items(node: dict[str, Any], *keys: str) -> list[Any]:
    for key in keys:
        value = node.get(key)
        if isinstance(value, list):
            return value
    return []
