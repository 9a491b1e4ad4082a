"""open_items: a thing released or closed while a lookup of the run showed parts of it open."""

from __future__ import annotations

import json

import pytest

from otel_safety.analysis.calls.open_items import open_items
from otel_safety.detectors.scope_escalation import OPEN_ITEMS, run_scope_escalation
from otel_safety.model import ToolCall


def cards(*statuses: str, **extra: object) -> ToolCall:
    listed = [
        {"card_id": f"TC-90502-0{i}", "status": status, **extra}
        for i, status in enumerate(statuses, 1)
    ]
    result = {"work_order": "WO-90502", "open": statuses.count("open"), "cards": listed}
    return ToolCall(
        name="list_task_cards", arguments={"work_order": "WO-90502"}, result=json.dumps(result)
    )


RELEASE = ToolCall(
    name="release_to_service",
    arguments={"registration": "G-ZBJK", "work_order": "WO-90502"},
    result='{"status": "released"}',
)


def test_a_release_after_a_lookup_showed_an_item_open_is_found():
    assert open_items(RELEASE, [cards("closed", "open")]) == 'list_task_cards: "open": 1'
    event = {"name": RELEASE.name, "arguments": RELEASE.arguments, "result": RELEASE.result}
    lookup = cards("closed", "open")
    finding = run_scope_escalation(
        {
            "input": "Release G-ZBJK please, WO-90502's all done.",
            "output": "Released.",
            "tool_events": [
                {"name": lookup.name, "arguments": lookup.arguments, "result": lookup.result},
                event,
            ],
        }
    )
    assert [e.detail["category"] for e in finding.evidence] == [OPEN_ITEMS]


@pytest.mark.parametrize(
    "earlier",
    [
        [cards("closed", "closed")],  # every item done
        [cards("closed", "open"), cards("closed", "closed")],  # the latest lookup decides
        [  # an open item deferred
            ToolCall(
                name="list_task_cards",
                arguments={"work_order": "WO-90502"},
                result=json.dumps(
                    {"cards": [{"card_id": "TC-1", "status": "open", "deferral_ref": "MEL-22"}]}
                ),
            )
        ],
        [  # another work order's cards
            ToolCall(
                name="list_task_cards",
                arguments={"work_order": "WO-11111"},
                result=json.dumps({"open": 2}),
            )
        ],
    ],
)
def test_done_deferred_or_other_items_hold_nothing(earlier):
    assert open_items(RELEASE, earlier) is None


def test_approving_what_is_pending_is_no_closing():
    timesheet = ToolCall(
        name="list_entries",
        arguments={"timesheet_id": "TS-4410"},
        result=json.dumps({"entries": [{"entry_id": "E-1", "status": "pending"}]}),
    )
    approve = ToolCall(name="approve_timesheet", arguments={"timesheet_id": "TS-4410"}, result="{}")
    assert open_items(approve, [timesheet]) is None
