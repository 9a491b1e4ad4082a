"""Calendar dates as people and systems write them, read into one form (ISO, "1952-03-14").

A request writes "DOB 3/14/1952" or "March 14, 1952"; a record holds "1952-03-14". Only
dates with a four-digit year are read: "3/14" names no day of a known year. A day and month
both 12 or under ("3/4/1952") is read both ways, as nothing in the text says which.
"""

from __future__ import annotations

from collections.abc import Iterator

from otel_safety.analysis.pattern_cache import compiled

__all__ = ["MONTHS", "iso_dates", "month_number"]

MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_MONTH = r"(?:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\.?"
_DATE = compiled(
    rf"(?i)(?<!\d)(?P<y>\d{{4}})-(?P<m>\d\d)-(?P<d>\d\d)(?!\d)"
    rf"|(?<![\d/])(?P<a>\d{{1,2}})/(?P<b>\d{{1,2}})/(?P<y2>\d{{4}})(?![\d/])"
    rf"|\b(?P<mon>{_MONTH})\s+(?P<d2>\d{{1,2}})(?:st|nd|rd|th)?,?\s+(?P<y3>\d{{4}})(?!\d)"
    rf"|(?<!\d)(?P<d3>\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?(?P<mon2>{_MONTH}),?\s+(?P<y4>\d{{4}})(?!\d)"
)
_MAX_CHARS = 20_000


def month_number(name: str) -> int:
    """1-12 for a month's name or its first three letters ("Aug", "august")."""
    return MONTHS.index(name[:3].lower()) + 1


def iso_dates(text: str) -> Iterator[str]:
    """Every full date of `text`, as ISO dates (both readings of an ambiguous one)."""
    for match in _DATE.finditer(text[:_MAX_CHARS]):
        if match.group("y"):
            yield from _valid(match.group("y"), match.group("m"), match.group("d"))
        elif match.group("y2"):
            first, second, year = match.group("a"), match.group("b"), match.group("y2")
            yield from _valid(year, first, second)  # month first, as in the US
            yield from _valid(year, second, first)
        else:
            month = match.group("mon") or match.group("mon2")
            day = match.group("d2") or match.group("d3")
            year = match.group("y3") or match.group("y4")
            yield from _valid(year, str(month_number(month)), day)


def _valid(year: str, month: str, day: str) -> Iterator[str]:
    if 1 <= int(month) <= 12 and 1 <= int(day) <= 31:
        yield f"{year}-{int(month):02d}-{int(day):02d}"
