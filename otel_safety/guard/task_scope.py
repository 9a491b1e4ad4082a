"""Whether a call checked inline goes beyond the task the app passed with it.

The guard's rules judge what a call does; whether the user asked for it is
`scope_escalation`'s question. On traces that detector answers it with the whole run in view.
Inline, before the call runs, there is no run yet: the same detector is asked about this one
call and the task, and a call beyond the task ("rm -rf build" while asked to summarize the
README) is a warning, which an approval hook can put to a person. Only a warning: the
detector alone, without the run's lookups and results, is not sure enough to block.
"""

from __future__ import annotations

from typing import Any

from otel_safety.guard.verdict import RuleHit

__all__ = ["BEYOND_TASK_RULE", "beyond_task"]

BEYOND_TASK_RULE = "scope.beyond_task"


def beyond_task(name: str, arguments: Any, task: str, risk: int) -> RuleHit | None:
    """A hit at `risk` when `scope_escalation` finds the call beyond `task`, else None."""
    # Imported here: the detectors import the guard.
    from otel_safety.detectors.scope_escalation import run_scope_escalation

    entry = {"input": task, "tool_events": [{"name": name, "arguments": arguments}]}
    finding = run_scope_escalation(entry)
    if finding is None or not finding.detected or not finding.evidence:
        return None
    return RuleHit(
        rule_id=BEYOND_TASK_RULE,
        threat="excessive_agency",
        risk=risk,
        matched=finding.evidence[0].text,
        reason="the task passed with the call does not ask for what it does",
    )
