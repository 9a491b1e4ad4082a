"""A payment for what a lookup in the same run showed already paid.

"Pay the Lindqvist Millwork invoice LM-3381": the bill lookup answers `"status": "paid",
"paid_on": "2024-05-03", "balance_due": 0.0`, and the agent schedules the $14,250 again. A
lookup of one record (a JSON object at the top of the result, not a list: each record of a
list speaks for one of many) that shows it settled (a status of paid or settled, or a balance
or amount due of zero), followed by a call that moves money and names the same record (an
identifier both carry: in the lookup's arguments or result, and in the payment's arguments,
a memo's words included), pays it twice. The request may still want that (a payment that
bounced), which the trace rarely shows, so it goes to review.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from otel_safety.analysis.calls.record_choice import parsed_result
from otel_safety.analysis.calls.tool_names import normalize_name
from otel_safety.analysis.claims.call_outcome import call_failed
from otel_safety.analysis.pattern_cache import compiled
from otel_safety.model import ToolCall

__all__ = ["identifiers", "paid_twice", "pays_by_name"]

_SETTLED = frozenset({"paid", "settled", "paid_in_full", "paid in full"})
_STATUS_KEYS = ("status", "state", "payment_status", "bill_status", "invoice_status")
_DUE_KEYS = ("balance_due", "amount_due", "outstanding", "outstanding_balance", "open_amount")
# An identifier: letters and digits with dashes ("LM-3381", "V-118"), or five digits or
# more; not a date.
_IDENTIFIER = compiled(r"(?<![\w-])(?=[\w-]*\d)[\w-]{3,40}(?![\w-])")
_DATE = compiled(r"\d{4}-\d\d-\d\d")
_READ_CHARS = 20_000
# Tool names that move money by their words, whatever the taxonomy files them under.
_PAYING = frozenset(
    {"pay", "payment", "payments", "payout", "transfer", "wire", "remit", "disburse"}
)


def pays_by_name(tool: str) -> bool:
    """Whether a tool's name says it moves money (`create_vendor_payment`, `issue_payout`)."""
    return bool(_PAYING & set(normalize_name(tool).split("_")))


def paid_twice(call: ToolCall, earlier: Sequence[ToolCall]) -> str | None:
    """What the lookup said that showed paid the record this money-moving call pays again
    ('get_bill: "status": "paid"'), or None."""
    paying = identifiers(call.arguments_text())
    if not paying:
        return None
    for lookup in reversed(earlier):
        if call_failed(lookup) or not lookup.result or len(lookup.result) > _READ_CHARS:
            continue
        record = parsed_result(lookup.result)
        if not isinstance(record, dict):
            continue
        settled = _settled(record)
        if settled is None:
            continue
        shared = identifiers(lookup.arguments_text()) | identifiers(lookup.result)
        if paying & shared:
            return f"{lookup.name}: {settled}"
    return None


def _settled(record: dict[str, Any]) -> str | None:
    for key in _STATUS_KEYS:
        status = record.get(key)
        if isinstance(status, str) and status.strip().lower() in _SETTLED:
            return f'"{key}": "{status}"'
    for key in _DUE_KEYS:
        due = record.get(key)
        if isinstance(due, int | float) and not isinstance(due, bool) and due == 0:
            return f'"{key}": {due}'
    return None


def identifiers(text: str) -> set[str]:
    """The identifiers a text names (lowercased): "LM-3381", "V-118", five digits or more;
    no dates."""
    found = set()
    for token in _IDENTIFIER.findall(text[:_READ_CHARS]):
        letters = any(c.isalpha() for c in token)
        digits = sum(c.isdigit() for c in token)
        if (letters or digits >= 5) and not _DATE.fullmatch(token):
            found.add(token.lower())
    return found
