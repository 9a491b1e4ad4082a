"""Whether a tool call did its job: its span's status, or what its own result says.

Many tools report failure in-band: the span ends OK while the result reads
`{"status": "failed", "error_code": "PAYEE_ACCOUNT_CLOSED"}` or `Error: file not found`. A
call like that shows the attempt, not the action, exactly as one whose span is an error:
"Rent's paid" after it is a claim no call backs, and a harmful task whose calls all failed
was not carried out. Only the result's own top level counts (its JSON object's keys, or its
first line), so an email or a page that merely mentions a failure is no failed call.
"""

from __future__ import annotations

import json

import regex

from otel_safety.analysis.memo import content_memo
from otel_safety.analysis.pattern_cache import compiled
from otel_safety.model import ToolCall

__all__ = ["call_failed", "failure_in_result", "partial_failure"]

_READ_CHARS = 4_000  # a failure report is short; a longer result is data
_FAILED_STATUS = frozenset(
    {
        "failed", "failure", "fail", "error", "errored", "rejected", "declined", "denied",
        "unauthorized", "forbidden", "timeout", "timed_out", "cancelled", "canceled",
        "not_found", "unreachable", "invalid",
        # Asked to act, the tool did not, or not yet: a clash, a waiting list, a sign-off owed.
        "conflict", "waitlisted", "pending_approval", "awaiting_approval", "approval_required",
        "requires_approval", "not_booked", "blocked", "refused",
    }
)  # fmt: skip
_STATUS_KEYS = ("status", "state", "result", "outcome")
_ERROR_KEYS = ("error", "error_code", "error_message", "errors", "exception", "fault")
_SUCCESS_KEYS = ("success", "ok", "succeeded")
# A plain-text result whose first line is the tool's own failure report ("Error: ...",
# "fatal: ...", a traceback, an HTTP error). What a program printed about its work ("FAILED
# tests/test_a.py", "3 failed") is its output, not a failed call.
_FAILED_LINE = compiled(
    r"^\s*(?:(?:error|err|fatal|exception)\s*:|traceback \(most recent call last\)"
    r"|permission denied|access denied|no such file or directory|command not found"
    r"|\d{3} (?:bad request|unauthorized|forbidden|not found|internal server error"
    r"|service unavailable|gateway timeout)\b|http(?:/[\d.]+)? [45]\d\d\b)",
    regex.IGNORECASE,
)


# Outcomes that are a failure for most calls and the very success of a call that asks for
# them: `cancel_order` answering "status": "cancelled", a reply to an invitation with
# "response": "decline" answering "declined". Each maps to the stems that ask for it.
_ASKED_OUTCOMES = {
    "cancelled": ("cancel",),
    "canceled": ("cancel",),
    "declined": ("declin",),
    "rejected": ("reject",),
    "denied": ("deny", "deni"),
    "blocked": ("block",),
    "refused": ("refus",),
}


def call_failed(call: ToolCall) -> bool:
    """True when the call's span failed or its result reports that it did (an outcome the
    call itself asked for, such as a cancellation's "cancelled", is no failure)."""
    if call.error:
        return True
    failure = failure_in_result(call.result) if call.result else ""
    return bool(failure) and not _asked_for(call, failure)


# A result that counts what failed (`"failed": 3`, `"bounced": [...]`, `"unprocessed": 2`;
# not `"excluded"`, which a bulk send's do-not-contact list is too), and the statuses by
# which one record of a list reports its part failed ("status": "timeout" for one site).
_FAILED_PART_COUNT = compiled(
    r"^(?:n_|num_|number_of_|count_|total_)?(?:failed|failures|failure|errors|errored|bounced"
    r"|rejected|undelivered|not_sent|unsent|skipped|timed_out|timeouts|unreachable"
    r"|unprocessed|not_processed)"
    r"(?:_count|_total|_n)?$",
    regex.IGNORECASE,
)
_FAILED_PART_STATUS = _FAILED_STATUS | {"partial", "incomplete", "skipped", "timed out"}
_RECORD_STATUS_KEYS = ("status", "state")  # not "outcome": a search's hits carry that as data
_PART_READ_CHARS = 20_000


def partial_failure(call: ToolCall) -> str:
    """The words by which a call's own JSON result reports that part of its work failed
    while the rest was done ("" if it does not): a count of failures at its top level, or a
    list of records of which some, not all, have a failed status. A status the call asks
    for (a cancellation's "cancelled") is no failure."""
    text = (call.result or "").strip()
    if not text.startswith("{") or len(text) > _PART_READ_CHARS:
        return ""
    try:
        parsed = json.loads(text)
    except (ValueError, RecursionError):
        return ""
    if not isinstance(parsed, dict):
        return ""
    for key, value in parsed.items():
        if not _FAILED_PART_COUNT.match(str(key)):
            continue
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return f'"{key}": {value}'
        if isinstance(value, list) and value:
            return f'"{key}": {len(value)} listed'
    for key, value in parsed.items():
        records = (
            [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []
        )
        failed = [status for record in records if (status := _record_failure(record, call))]
        if failed and len(failed) < len(records):
            return f'"{key}": {len(failed)} of {len(records)} "{failed[0]}"'
    return ""


def _record_failure(record: dict, call: ToolCall) -> str:
    """How one record of a list reports its part failed: a failed status, or, as a whole
    result would, a success flag false or an error (`"delivered": false, "error": "Onboard
    terminal offline"` for one of three trains)."""
    for key in _RECORD_STATUS_KEYS:
        status = record.get(key)
        if isinstance(status, str) and status.strip().lower() in _FAILED_PART_STATUS:
            failure = f'"{key}": "{status.strip().lower()}"'
            return "" if _asked_for(call, failure) else status.strip().lower()
    key = _failure_flag(record)
    return "" if key is None else f"{key}: false" if key in _SUCCESS_KEYS else key


def _asked_for(call: ToolCall, failure: str) -> bool:
    """Whether the status that `failure_in_result` quoted ('"status": "cancelled"') is the
    outcome the call's name or one of its short values asks for."""
    status = failure.rsplit(":", 1)[-1].strip().strip('"').lower()
    stems = _ASKED_OUTCOMES.get(status)
    if not stems:
        return False
    values = call.arguments.values() if isinstance(call.arguments, dict) else ()
    asked = [call.name.lower()]
    asked += [v.lower() for v in values if isinstance(v, str) and len(v) <= 40]
    return any(stem in text for stem in stems for text in asked)


@content_memo
def failure_in_result(result: str) -> str:
    """The words by which a tool's result reports its call failed ("" if it does not)."""
    text = result.strip()
    if not text or len(text) > _READ_CHARS:
        return ""
    if text[0] == "{":
        try:
            parsed = json.loads(text)
        except (ValueError, RecursionError):
            parsed = None
        if isinstance(parsed, dict):
            return _failed_object(parsed)
    first = text.split("\n", 1)[0]
    found = _FAILED_LINE.match(first)
    return first[:120] if found else ""


def _failed_object(value: dict) -> str:
    for key in _STATUS_KEYS:
        status = value.get(key)
        if isinstance(status, str) and status.strip().lower() in _FAILED_STATUS:
            return f'"{key}": "{status}"'
        if isinstance(status, int) and not isinstance(status, bool) and 400 <= status <= 599:
            return f'"{key}": {status}'
    key = _failure_flag(value)
    if key is None:
        return ""
    return f'"{key}": false' if key in _SUCCESS_KEYS else f'"{key}": {json.dumps(value[key])[:100]}'


def _failure_flag(value: dict) -> str | None:
    """The key by which an object says it failed: a success flag false, or an error set."""
    for key in _SUCCESS_KEYS:
        if value.get(key) is False:
            return key
    for key in _ERROR_KEYS:
        error = value.get(key)
        if error and not isinstance(error, bool):
            return key
    return None
