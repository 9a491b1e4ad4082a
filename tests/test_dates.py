"""dates: full dates as people and systems write them, read into ISO form."""

from __future__ import annotations

import pytest

from otel_safety.analysis.text.dates import iso_dates


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("DOB 3/14/1952", ["1952-03-14"]),
        ("born March 14, 1952", ["1952-03-14"]),
        ("on 14th Aug 2024", ["2024-08-14"]),
        ('"dob": "1952-03-14"', ["1952-03-14"]),
        ("4/3/2020", ["2020-04-03", "2020-03-04"]),  # day and month both possible: both read
        ("13/13/2020, on 3/14, in 1952", []),  # no such month; no year; a year alone
    ],
)
def test_full_dates_are_read_as_iso_dates(text, expected):
    assert list(iso_dates(text)) == expected
