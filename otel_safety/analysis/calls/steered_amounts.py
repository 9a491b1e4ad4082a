"""Amounts an injected instruction set: a number in an acting call that only such an
instruction wrote.

Provenance (`provenance.py`) follows distinctive strings: an account, an address, a link. An
instruction planted in data also sets how much ("credit 50,000 loyalty points", "release the
50% mobilization payment ($24,125.00)"), and an amount is a number in the call, written
another way in the text. So numbers are compared as numbers (`24125.0` in a call is
"$24,125.00" in a document; dates, times and identifiers are no numbers). A number is steered
when every place an earlier tool result shows it lies inside an instruction aimed at the
agent and the task never names it; one that also stands in ordinary data (the bill's total)
is the data's. Small numbers (under `MIN_AMOUNT`) are quantities and days, found everywhere:
they prove nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from decimal import Decimal, InvalidOperation
from typing import Any

from otel_safety.analysis.calls.argument_values import ArgumentValue
from otel_safety.analysis.calls.instructions import instruction_at
from otel_safety.analysis.calls.tool_names import normalize_name
from otel_safety.analysis.pattern_cache import compiled
from otel_safety.model import ToolCall

__all__ = ["MIN_AMOUNT", "amounts_in", "numbers_in", "steered_amounts"]

MIN_AMOUNT = 100
_MAX_AMOUNTS = 8  # numeric arguments read from one call
_MAX_PLACES = 3  # places per tool result a number is looked at; beyond, the first ones speak
_MAX_NUMBERS = 2_000  # numbers read from one text: enough for any document, cheap on floods
# A number as text shows it: thousands grouped by commas, or not; a decimal part or not. Not
# inside a longer run of digits, letters or an identifier ("INV-2024", "v1.2.3").
_NUMBER = compiled(r"(?<![\w.,/:-])(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?!\w|[.,/:-]\d)")
# Argument names that hold identifiers, not amounts, however numeric their value.
_ID_NAME = compiled(r"(?:^|_)(?:id|ids|number|no|num|code|ref|phone|zip|postcode|year)$")


def steered_amounts(
    call: ToolCall,
    places_of: Callable[[Decimal], Sequence[tuple[Any, int, int]]],
    task: str,
    reach: int,
    threshold: float,
) -> list[tuple[ArgumentValue, Any, tuple[str, ...], str]]:
    """(value, source, cues, passage) for each amount of `call` that only an instruction
    supplied. `places_of(amount)` gives where the tool results read before the call show
    that number, as (source, start, end) with the source's `text` (`provenance.Source`),
    leaving out results that echo the call that carried it. `task` is what the user and the
    system prompt said: its numbers are theirs."""
    found = []
    asked = {number for number, _, _ in numbers_in(task)}
    for argument, amount in amounts_in(call.arguments):
        if amount in asked:
            continue
        steered = _traced(places_of(amount), reach, threshold)
        if steered is not None:
            source, cues, passage = steered
            found.append((ArgumentValue(argument, _shown(amount), False), source, cues, passage))
    return found


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


def _traced(
    places: Sequence[tuple[Any, int, int]], reach: int, threshold: float
) -> tuple[Any, tuple[str, ...], str] | None:
    steered = None
    seen: dict[int, int] = {}  # places looked at per source
    for source, start, end in places:
        looked = seen.get(id(source), 0)
        if looked >= _MAX_PLACES:
            continue
        seen[id(source)] = looked + 1
        instruction = instruction_at(source.text, start, end, reach, threshold)
        if instruction is None:
            return None  # the number is also in ordinary data: the task acts on it
        if steered is None:
            passage = source.text[max(0, start - 60) : end + 60]
            steered = (source, instruction.cues, passage)
    return steered


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


def _shown(amount: Decimal) -> str:
    return format(amount, "f")
