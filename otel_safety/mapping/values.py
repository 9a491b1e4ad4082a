"""Tolerant readers for attribute values: telemetry is messy and must never raise into the app."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from otel_safety.model import Message, ToolCall

MAX_TEXT_CHARS = 64_000


class Notes(list[str]):
    """Problems met while reading one span; recorded on the span instead of raised."""

    def add(self, message: str) -> None:
        if message not in self:
            self.append(message)


def text(value: Any, notes: Notes, key: str) -> str:
    """Any attribute value as bounded text."""
    if value is None:
        return ""
    if isinstance(value, bytes):
        value = decode(value, notes, key)
    elif not isinstance(value, str):
        value = value if isinstance(value, int | float | bool) else _dumps(value)
        value = str(value)
    if len(value) > MAX_TEXT_CHARS:
        notes.add(f"{key}: value of {len(value)} chars truncated to {MAX_TEXT_CHARS}")
        value = value[:MAX_TEXT_CHARS]
    return value


def decode(value: bytes, notes: Notes, key: str) -> str:
    """Bytes where text belongs: keep what decodes, say that something did not."""
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        notes.add(f"{key}: invalid UTF-8 replaced with U+FFFD")
        return value.decode("utf-8", errors="replace")


def structured(value: Any, notes: Notes, key: str) -> Any:
    """A value that may arrive as a JSON string or already structured (OTLP AnyValue)."""
    if value is None:
        return None
    if isinstance(value, bytes):
        value = decode(value, notes, key)
    if isinstance(value, str):
        stripped = value.strip()
        if not stripped or stripped[0] not in '[{"':
            return value
        try:
            return json.loads(stripped)
        except ValueError as exc:
            if stripped[0] == '"':  # plain text that happens to start with a quote
                return value
            notes.add(f"{key}: malformed JSON ({exc.msg} at char {exc.pos})")
            return None
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, list | tuple):
        return list(value)
    return value


def json_list(value: Any, notes: Notes, key: str) -> list[Any]:
    """A value that should be a list of objects (messages, parts)."""
    parsed = structured(value, notes, key)
    if parsed is None:
        return []
    if isinstance(parsed, dict):
        return [parsed]
    if isinstance(parsed, list):
        return parsed
    notes.add(f"{key}: expected a JSON list, got {type(parsed).__name__}")
    return []


def arguments(value: Any, notes: Notes, key: str) -> dict[str, Any] | str | None:
    """Tool-call arguments: a dict when they parse as an object, else the raw text."""
    if value is None:
        return None
    parsed = structured(value, notes, key)
    if isinstance(parsed, dict):
        return parsed
    if parsed is None:
        return text(value, notes, key)
    return text(parsed, notes, key)


def indexed(attributes: Mapping[str, Any], prefix: str) -> list[dict[str, Any]]:
    """Group flattened `prefix.N.rest` keys into a list of `{rest: value}` dicts, by N."""
    groups: dict[int, dict[str, Any]] = {}
    for key, value in attributes.items():
        if not key.startswith(prefix):
            continue
        index, _, rest = key[len(prefix) :].partition(".")
        if index.isdigit() and rest:
            groups.setdefault(int(index), {})[rest] = value
    return [groups[index] for index in sorted(groups)]


def message_from_parts(
    role: str, parts: list[Any], notes: Notes, key: str, span_id: str, name: str | None = None
) -> list[Message]:
    """GenAI `parts` to messages: text joins into content, tool responses become role `tool`."""
    texts: list[str] = []
    calls: list[ToolCall] = []
    tool_messages: list[Message] = []
    for part in parts:
        if isinstance(part, str):
            texts.append(part)
            continue
        if not isinstance(part, dict):
            notes.add(f"{key}: message part is {type(part).__name__}, not an object")
            continue
        kind = part.get("type", "text")
        if kind == "text":
            texts.append(text(part.get("content", part.get("text")), notes, key))
        elif kind == "tool_call":
            calls.append(
                ToolCall(
                    id=_optional_str(part.get("id")),
                    name=str(part.get("name") or "unknown"),
                    arguments=arguments(part.get("arguments"), notes, key),
                    source="model_output",
                    span_id=span_id,
                )
            )
        elif kind == "tool_call_response":
            response = part.get("response", part.get("result"))
            tool_messages.append(
                Message(
                    role="tool",
                    content=text(response, notes, key),
                    tool_call_id=_optional_str(part.get("id")),
                    name=_optional_str(part.get("name")),
                    span_id=span_id,
                )
            )
        # reasoning, blob, uri, file and unknown parts carry no text a detector reads here.
    messages: list[Message] = []
    if texts or calls or not tool_messages:
        messages.append(
            Message(
                role=role,
                content="\n".join(t for t in texts if t),
                tool_calls=calls,
                name=name,
                span_id=span_id,
            )
        )
    return messages + tool_messages


def _optional_str(value: Any) -> str | None:
    return None if value is None else str(value)


def _dumps(value: Any) -> str:
    try:
        return json.dumps(value, default=str, ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(value)
