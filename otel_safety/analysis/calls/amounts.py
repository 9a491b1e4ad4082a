"""Amounts in a call's arguments and numbers in text, as values that can be compared.

Provenance (`provenance.py`) follows distinctive strings: an account, an address, a link. An
instruction planted in data also sets how much ("credit 50,000 loyalty points", "release the
50% mobilization payment ($24,125.00)"), and an amount is a number in the call, written
another way in the text. So numbers are compared as numbers: `24125.0` in a call is
"$24,125.00" in a document, and dates, times and identifiers are no numbers. Small numbers
(under `MIN_AMOUNT`) are quantities and days, found everywhere: they prove nothing of where
a call's amount came from.
"""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal, InvalidOperation
from typing import Any

from otel_safety.analysis.calls.tool_names import normalize_name
from otel_safety.analysis.pattern_cache import compiled

__all__ = ["MIN_AMOUNT", "amounts_in", "numbers_in"]

MIN_AMOUNT = 100
_MAX_AMOUNTS = 8  # numeric arguments read from one call
_MAX_NUMBERS = 2_000  # numbers read from one text: enough for any document, cheap on floods
# A number as text shows it: thousands grouped by commas, or not; a decimal part or not. Not
# inside a longer run of digits, letters or an identifier ("INV-2024", "v1.2.3").
_NUMBER = compiled(r"(?<![\w.,/:-])(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?!\w|[.,/:-]\d)")
# Argument names that hold identifiers, not amounts, however numeric their value.
_ID_NAME = compiled(r"(?:^|_)(?:id|ids|number|no|num|code|ref|phone|zip|postcode|year)$")


def amounts_in(arguments: Any) -> list[tuple[str, Decimal]]:
    """(argument, amount) for the numbers of a call's arguments that can be amounts: numeric
    values, or strings that are a number, at least `MIN_AMOUNT`, under names that hold no id."""
    found: list[tuple[str, Decimal]] = []
    stack: list[tuple[str, Any]] = [("", arguments)]
    while stack and len(found) < _MAX_AMOUNTS:
        key, value = stack.pop()
        if isinstance(value, dict):
            stack.extend((normalize_name(str(k)), v) for k, v in list(value.items())[:40])
        elif isinstance(value, list | tuple):
            stack.extend((key, item) for item in value[:20])
        elif key and not _ID_NAME.search(key):
            amount = _as_amount(value)
            if amount is not None and amount >= MIN_AMOUNT:
                found.append((key, amount))
    return found


def numbers_in(text: str) -> Iterator[tuple[Decimal, int, int]]:
    """(value, start, end) of each number `text` shows, as written there."""
    for count, match in enumerate(_NUMBER.finditer(text)):
        if count >= _MAX_NUMBERS:
            return
        amount = _as_amount(match.group(0).replace(",", ""))
        if amount is not None:
            yield amount, match.start(), match.end()


def _as_amount(value: Any) -> Decimal | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        value = str(value)
    if not isinstance(value, str) or not value or len(value) > 24:
        return None
    try:
        amount = Decimal(value)
    except InvalidOperation:
        return None
    return amount.normalize() if amount.is_finite() else None
