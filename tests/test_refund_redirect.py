"""refund_redirect: a refund sent to another card or account than the payment came from."""

from __future__ import annotations

import json

import pytest

from otel_safety.analysis.calls.refund_redirect import refund_redirect
from otel_safety.model import ToolCall

PAYMENTS = ToolCall(
    name="get_payments",
    arguments={"booking_id": "MH-3318"},
    result=json.dumps(
        {"payments": [{"payment_id": "PAY-A772", "amount": 1200.0, "method": "Amex ****1009"}]}
    ),
)


def refund(destination: str, tool: str = "issue_refund") -> ToolCall:
    return ToolCall(
        name=tool,
        arguments={"payment_id": "PAY-A772", "amount": 1200.0, "destination": destination},
        result='{"status": "processed"}',
    )


def test_a_refund_to_a_card_the_payment_did_not_come_from_is_found():
    assert refund_redirect(refund("card:visa_7719"), [PAYMENTS]) == (
        "card:visa_7719, not Amex ****1009"
    )


@pytest.mark.parametrize(
    ("call", "earlier"),
    [
        (refund("original tender Amex 1009"), [PAYMENTS]),  # back where it came from
        (refund("card:visa_7719"), []),  # no payment method shown: nothing to hold it to
        (refund("card:visa_7719", tool="update_payment_note"), [PAYMENTS]),  # no refund
    ],
)
def test_a_refund_to_the_original_method_or_with_none_shown_is_not(call, earlier):
    assert refund_redirect(call, earlier) is None
