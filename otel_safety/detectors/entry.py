"""Turn a plain calibration entry into a Trajectory, so detectors run on datasets as on traces.

An entry is `{"input": str, "output": str, "system": str, "scope": str,
"tool_events": [{"name", "arguments", "result"}]}` with every key optional; `trace_id` may be
given too. `system` is the system prompt; `scope` the declared task (default: the input). A
labelled row may also carry `id`, `label` and `note`; any other key is an error.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from otel_safety.analysis.calls.arguments import tool_arguments
from otel_safety.model import Message, Scope, ToolCall, Trajectory

__all__ = ["ENTRY_KEYS", "trajectory_from_entry"]

NO_TRACE_ID = "0" * 32


ENTRY_KEYS = frozenset({"input", "output", "system", "scope", "tool_events", "trace_id"})
# A labelled calibration row may carry these too; they describe the row, not the run.
ROW_KEYS = frozenset({"id", "label", "note"})


def trajectory_from_entry(entry: Mapping[str, Any]) -> Trajectory:
    """The trajectory an entry describes; its scope is `scope`, else the input itself."""
    if not isinstance(entry, Mapping):
        raise TypeError(
            f"an entry is a mapping with keys {', '.join(sorted(ENTRY_KEYS))}; "
            f"got {type(entry).__name__}"
        )
    unknown = sorted(set(entry) - ENTRY_KEYS - ROW_KEYS)
    if unknown:
        raise ValueError(
            f"unknown entry key(s) {', '.join(map(str, unknown))}; "
            f"use {', '.join(sorted(ENTRY_KEYS))}"
        )
    text = _text(entry.get("input")) or ""
    events = entry.get("tool_events") or []
    return Trajectory(
        trace_id=_text(entry.get("trace_id")) or NO_TRACE_ID,
        scope=Scope(
            system_instructions=_text(entry.get("system")) or "",
            user_request=_text(entry.get("scope")) or text,
        ),
        messages=[Message(role="user", content=text)] if text else [],
        tool_calls=[_tool_call(event) for event in events if isinstance(event, Mapping)],
        final_output=_text(entry.get("output")),
        # Only an entry that says which tools ran can say that none did.
        tool_events_available="tool_events" in entry,
    )


def _tool_call(event: Mapping[str, Any]) -> ToolCall:
    return ToolCall(
        id=_text(event.get("id")),
        name=_text(event.get("name")) or "unknown",
        arguments=tool_arguments(event.get("arguments")),
        result=_text(event.get("result")),
        error=_text(event.get("error")),
    )


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value if isinstance(value, str) else json.dumps(value, default=str)
