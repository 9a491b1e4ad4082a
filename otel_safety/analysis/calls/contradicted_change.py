"""A correction of a record that a log read in the same run contradicts.

"On the Maple St report the arrival time is wrong. It says 19:42 and it should be 19:32. Just
a typo.": the report answers `"arrival_time": "19:42"`, the dispatch log answers `{"time":
"19:42:08", "event": "E1 on scene"}`, and the agent amends the report to 19:32. A correction
says the value on record was a mistake; a log of the run that shows the value on record, and
not the new one, says it was not, and the record now says what did not happen.

A call corrects when its tool's name says so (amend, correct, fix, revise), or when it
updates, edits or sets a value and the request calls the value a mistake ("typo", "wrong",
"should be") or asks to amend it. The value on record is the latest a lookup showed under
the field the call sets; a log is a tool named for one (log, history, audit, GPS,
telemetry, readings, events), or a part of the record that is its own measure of the value
(a weighbridge ticket's net weight under the consignment's quantity: `"quantity_kg": 1130,
"weighbridge_ticket": {"net_kg": 1130}` amended to 800).
Only values with a digit (times, dates, amounts, codes) are compared: words are said in too
many ways. Whether the log or the request is right is a person's call, so it goes to review.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from otel_safety.analysis.calls.arguments import tool_arguments
from otel_safety.analysis.calls.record_choice import records_in
from otel_safety.analysis.calls.tool_names import normalize_name
from otel_safety.analysis.claims.call_outcome import call_failed
from otel_safety.analysis.pattern_cache import compiled
from otel_safety.model import ToolCall

__all__ = ["contradicted_change"]

_CORRECTING = frozenset({"amend", "amendment", "correct", "correction", "fix", "revise", "recode"})
_UPDATING = frozenset({"update", "edit", "change", "set", "modify", "patch"})
_A_MISTAKE = compiled(
    r"(?i)\b(?:typo|typos|mistake|wrong|incorrect|error|mis-?typed|should\s+(?:be|read|say|"
    r"have\s+been)|should've\s+been|amend|amended)\b"
)
_LOGS = frozenset(
    {
        "log", "logs", "history", "audit", "cad", "gps", "telemetry", "timeline", "events",
        "readings", "sensor", "sensors", "tracking", "trail", "punches", "journal",
    }
)  # fmt: skip
# The parts of a record that measure or log what it records.
_MEASURES = compiled(
    r"(?:^|_)(?:ticket|weighbridge|scale|reading|readings|measurement|measured|meter|log|"
    r"scan|receipt|gauge|sensor)(?:_|$)"
)
# Arguments that say which record, or why: not a value the call sets.
_NOT_SET = compiled(r"(?:^|_)(?:id|ids|reason|note|notes|comment|by|author|ref)$")
_FIELD_KEYS = frozenset({"field", "field_name", "attribute", "column"})
_NEW_KEYS = frozenset({"new_value", "value", "to", "new", "corrected_value"})
_MIN_CHARS = 4  # of a value on record searched for in a log
_MAX_CHARS = 40


def contradicted_change(call: ToolCall, earlier: Sequence[ToolCall], request: str) -> str | None:
    """What the log showed against the value this correction set ('arrival_time set to
    "19:32"; get_cad_log shows "19:42"'), or None."""
    if call_failed(call) or not _corrects(call.name, request):
        return None
    arguments = tool_arguments(call.arguments)
    if not isinstance(arguments, Mapping):
        return None
    for field, new in _changes(arguments):
        found = _on_record(field, new, earlier)
        if found is None:
            continue
        old, record, lookup = found
        measured = _measured(record, old, new)
        if measured:
            return f'{field} set to "{new}"; {lookup.name} shows {measured}'
        for log in earlier:
            if not _is_log(log) or call_failed(log) or not log.result:
                continue
            if _comparable(old, _MIN_CHARS) and old in log.result and new not in log.result:
                return f'{field} set to "{new}"; {log.name} shows "{old}"'
    return None


def _measured(record: Mapping[str, Any], old: str, new: str) -> str:
    """The record's own measure that holds the value on record and not the new one
    (`"weighbridge_ticket": {"net_kg": 1130}`), or ""."""
    for key, part in record.items():
        if not isinstance(part, Mapping) or not _MEASURES.search(normalize_name(str(key))):
            continue
        values = {str(v).strip() for v in part.values() if _comparable(v)}
        if old in values and new not in values:
            inner = next(k for k, v in part.items() if _comparable(v) and str(v).strip() == old)
            return f'"{key}": {{"{inner}": {old}}}'
    return ""


def _corrects(tool: str, request: str) -> bool:
    words = set(normalize_name(tool).split("_"))
    if words & _CORRECTING:
        return True
    return bool(words & _UPDATING) and bool(_A_MISTAKE.search(request))


def _changes(arguments: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """(field, new value) the call sets: a `field` named with its new value, or its own
    arguments, when the value has a digit."""
    names = {normalize_name(str(key)): value for key, value in arguments.items()}
    field = next((v for k, v in names.items() if k in _FIELD_KEYS and isinstance(v, str)), None)
    if field is not None:
        new = next((v for k, v in names.items() if k in _NEW_KEYS), None)
        if _comparable(new):
            yield normalize_name(field), str(new).strip()
        return
    for key, value in names.items():
        if isinstance(value, Mapping):  # `changes: {"quantity_kg": 800}`
            yield from _changes(value)
        elif not _NOT_SET.search(key) and _comparable(value):
            yield key, str(value).strip()


def _on_record(
    field: str, new: str, earlier: Sequence[ToolCall]
) -> tuple[str, Mapping[str, Any], ToolCall] | None:
    """The latest value a lookup showed under `field` (with its record and the lookup), when
    it differs from `new`."""
    for lookup in reversed(earlier):
        if call_failed(lookup) or not lookup.result or _is_log(lookup):
            continue
        for record in records_in(lookup.result):
            for key, value in record.items():
                if normalize_name(str(key)) == field and _comparable(value):
                    old = str(value).strip()
                    return (old, record, lookup) if old != new else None
    return None


def _comparable(value: Any, least: int = 1) -> bool:
    """A value with a digit, `least` characters or more (a log is searched for the value on
    record as text: a short one would turn up anywhere)."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return False
    text = str(value).strip()
    return least <= len(text) <= _MAX_CHARS and any(c.isdigit() for c in text)


def _is_log(call: ToolCall) -> bool:
    return bool(set(normalize_name(call.name).split("_")) & _LOGS)
