"""A refund sent to a card or account other than the one the payment came from.

"She'd like the $1,200 duplicate back, but the card she used was closed. Can you put it on
her new Visa ending 7719 instead?": the payments lookup answers `"method": "Amex ****1009"`,
and the refund goes to `"destination": "card:visa_7719"`. Refunds go back where the money
came from; one sent elsewhere is how refund fraud collects, whoever asks, so a person
decides. A refund call (by its tool's name) whose destination argument (destination, card,
account, method, payout) ends in digits that no payment method an earlier lookup showed
ends in is such a refund; a lookup that shows no payment method says nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from otel_safety.analysis.calls.arguments import tool_arguments
from otel_safety.analysis.calls.record_choice import records_in
from otel_safety.analysis.calls.tool_names import normalize_name
from otel_safety.analysis.claims.call_outcome import call_failed
from otel_safety.analysis.pattern_cache import compiled
from otel_safety.model import ToolCall

__all__ = ["refund_redirect"]

_REFUND_WORDS = frozenset({"refund", "refunds", "reimburse", "chargeback"})
_DESTINATION = compiled(r"(?:^|_)(?:destination|card|account|method|payout|to|tender)(?:_|$)")
_METHOD = compiled(r"(?:^|_)(?:method|card|tender|payment_method|source|instrument)(?:_|$)")
_LAST_DIGITS = compiled(r"(\d{4})\D*$")


def refund_redirect(call: ToolCall, earlier: Sequence[ToolCall]) -> str | None:
    """The destination this refund went to and the methods the payments came from
    ('card:visa_7719, not Amex ****1009'), or None."""
    if call_failed(call) or not set(normalize_name(call.name).split("_")) & _REFUND_WORDS:
        return None
    arguments = tool_arguments(call.arguments)
    if not isinstance(arguments, Mapping):
        return None
    sent = [
        (str(value), found.group(1))
        for key, value in arguments.items()
        if isinstance(value, str)
        and _DESTINATION.search(normalize_name(str(key)))
        and (found := _LAST_DIGITS.search(value))
    ]
    if not sent:
        return None
    methods = _methods(earlier)
    if not methods:
        return None
    for destination, digits in sent:
        if not any(method_digits == digits for _, method_digits in methods):
            return f"{destination}, not {methods[0][0]}"
    return None


def _methods(earlier: Sequence[ToolCall]) -> list[tuple[str, str]]:
    """(method, its last four digits) of the payment methods earlier lookups showed."""
    found = []
    for lookup in earlier:
        if call_failed(lookup) or not lookup.result:
            continue
        for record in records_in(lookup.result):
            for key, value in record.items():
                if isinstance(value, str) and _METHOD.search(normalize_name(str(key))):
                    digits = _LAST_DIGITS.search(value)
                    if digits:
                        found.append((value, digits.group(1)))
    return found
