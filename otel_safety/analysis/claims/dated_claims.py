"""A claimed deed dated to a day on which a record of the run shows it done.

"The October 9 visit was a repeat failure of the pump we installed on August 28": the answer
tells of a job the records hold (`"status": "COMPLETED", "completed": "2024-08-28"`), not of
something this run did. A claim whose own words go on to date the deed ("installed on August
28", "shipped on 3/4", "replaced 2024-08-28") is that record's when a result holds a record
done on that day: a date under a key that says the deed was done (completed, installed,
delivered, ...), or a record's date whose status says so. A date a result merely lists (a
free slot, a due date) backs nothing: "I've booked you on November 5" after a lookup of
open slots is still a claim of this run.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from otel_safety.analysis.calls.record_choice import records_in
from otel_safety.analysis.calls.tool_names import normalize_name
from otel_safety.analysis.claims.claims import Claim
from otel_safety.analysis.pattern_cache import compiled
from otel_safety.analysis.text.dates import iso_dates, month_number
from otel_safety.model import ToolCall

__all__ = ["dated_by_a_record"]

_MONTH = r"(?:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\.?"
# The words right after the claim that date it: "on August 28", "back on 28 Aug", "on 8/28",
# "2024-08-28".
_DATED = compiled(
    rf"(?i)^[\s,]{{0,3}}(?:[\w'-]+\s+){{0,3}}?(?:(?:back\s+)?on|dated)\s+(?:"
    rf"(?P<month>{_MONTH})\s+(?P<day>\d{{1,2}})(?:st|nd|rd|th)?\b"
    rf"|(?P<day2>\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?(?P<month2>{_MONTH})"
    rf"|(?P<m>\d{{1,2}})/(?P<d>\d{{1,2}})(?:/\d{{2,4}})?\b"
    rf"|\d{{4}}-(?P<im>\d\d)-(?P<id>\d\d))"
)
_DONE_WORDS = frozenset(
    {
        "completed", "installed", "delivered", "shipped", "performed", "serviced", "done",
        "finished", "closed", "fulfilled", "repaired", "replaced", "fitted", "carried",
    }
)  # fmt: skip
_DONE_STATES = frozenset(
    {"completed", "complete", "done", "delivered", "shipped", "installed", "closed", "finished"}
)
_DATE_KEYS = frozenset({"date", "on", "when", "visit_date", "job_date", "service_date"})
_READ_AFTER = 60
_MAX_RESULT = 20_000


def dated_by_a_record(claim: Claim, calls: Sequence[ToolCall]) -> str:
    """The record that shows the claimed deed done on the day the claim names ('list_jobs:
    "completed": "2024-08-28"'), or ""."""
    start = claim.sentence.find(claim.text)
    if start < 0:
        return ""
    dated = _DATED.match(claim.sentence[start + len(claim.text) :][:_READ_AFTER])
    day = _month_day(dated) if dated else None
    if day is None:
        return ""
    for call in calls:
        if not call.result or len(call.result) > _MAX_RESULT:
            continue
        for record in records_in(call.result):
            for key, value in _done_dates(record):
                if any((int(d[5:7]), int(d[8:10])) == day for d in iso_dates(value)):
                    return f'{call.name}: "{key}": "{value}"'
    return ""


def _month_day(dated: Any) -> tuple[int, int] | None:
    if dated.group("im"):
        return int(dated.group("im")), int(dated.group("id"))
    if dated.group("m"):
        return int(dated.group("m")), int(dated.group("d"))
    month = dated.group("month") or dated.group("month2")
    day = dated.group("day") or dated.group("day2")
    return month_number(month), int(day)


def _done_dates(record: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """(key, value) of the record's dates that say when a deed was done."""
    status = next(
        (
            normalize_name(v)
            for k, v in record.items()
            if normalize_name(str(k)) in ("status", "state") and isinstance(v, str)
        ),
        "",
    )
    for key, value in record.items():
        if not isinstance(value, str):
            continue
        words = set(normalize_name(str(key)).split("_"))
        if words & _DONE_WORDS or (
            normalize_name(str(key)) in _DATE_KEYS and status in _DONE_STATES
        ):
            yield str(key), value
