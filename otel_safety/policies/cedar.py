"""Policies as code: Cedar policies decide deny / warn / allow over a trace's findings.

For every trace two authorization requests are asked (see docs/policies.md):

    principal = Agent::"<agent name or service>", resource = Trace::"<trace id>",
    action    = Action::"deny" and Action::"warn", context = findings, signals, claims

A policy that permits `Action::"deny"` denies the trace (HARD_STOP); one that permits
`Action::"warn"` warns (WARN); `Action::"allow"` is never asked: permitting it changes
nothing (use `forbid` on deny/warn for exemptions, Cedar's forbid wins over permit).
A `@decision` annotation must restate a permit's action; any other is refused at load.
By default the Cedar decision only adds to the default policy's level (the stricter wins);
with `alone=True` Cedar alone decides the trace's level. Needs the `policy` extra (cedarpy).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import regex

from otel_safety.extras import install_hint
from otel_safety.model import EscalationLevel, Finding, Trajectory
from otel_safety.policies.cedar_context import principal_id, trace_context
from otel_safety.policies.safeguards import SafeguardsPolicy
from otel_safety.policy import Policy

logger = logging.getLogger(__name__)

ACTIONS = {"deny": EscalationLevel.HARD_STOP, "warn": EscalationLevel.WARN}
KNOWN_ACTIONS = {*ACTIONS, "allow"}
DECISION_ANNOTATION = "decision"


class PolicyError(ValueError):
    """A Cedar policy that cannot be used; the message names the file and Cedar's reason."""


class CedarPolicy:
    """Escalation decided by Cedar policies over the findings and claims of each trace."""

    def __init__(
        self, source: str | os.PathLike[str], base: Policy | None = None, alone: bool = False
    ) -> None:
        """`source` is a `.cedar` file or the policies' text; `base` the policy whose level
        Cedar's adds to (the default safeguards policy unless given); `alone`: Cedar alone
        decides the trace's level, the detectors' severities only label the findings."""
        cedarpy = _cedarpy()
        text, self.origin = _read(source)
        try:
            self._policies = cedarpy.PolicySet.from_str(text)
        except ValueError as exc:
            hint = ""
            if regex.search(r"[<>=]=?\s*\d*\.\d", text):
                hint = " (Cedar has no decimals: scores and signals are whole percents, 0.5 -> 50)"
            raise PolicyError(f"{self.origin}: invalid Cedar policy: {exc}{hint}") from None
        _check_actions(cedarpy.policies_to_json_str(text) if text.strip() else "{}", self.origin)
        self._authorize = cedarpy.is_authorized_batch
        self.base: Policy = base or SafeguardsPolicy()
        self.alone = alone
        self._reported: set[str] = set()
        self.failures = 0  # traces Cedar could not decide, left at the base policy's level

    def decide(
        self, findings: Sequence[Finding], trajectory: Trajectory | None = None
    ) -> EscalationLevel:
        base = self.base.decide(findings, trajectory)
        try:
            decided = self.cedar_level(findings, trajectory, base)
        except Exception as exc:  # fail open to the base policy: the trace still gets a level
            self.failures += 1
            self._report(
                [
                    f"evaluation failed ({type(exc).__name__}: {exc}); "
                    "the base policy's level is used"
                ]
            )
            return base
        if self.alone:  # no finding shows a level above the trace's
            for finding in findings:
                finding.escalation = min(finding.escalation, decided)
            return decided
        return max(base, decided)

    def cedar_level(
        self,
        findings: Sequence[Finding],
        trajectory: Trajectory | None,
        base: EscalationLevel = EscalationLevel.NONE,
    ) -> EscalationLevel:
        """The strictest action the policies permit for this trace, NONE when none."""
        context = trace_context(findings, base)
        trace_id = trajectory.trace_id if trajectory else "unknown"
        requests = [
            _request(principal_id(trajectory), action, trace_id, context) for action in ACTIONS
        ]
        results = self._authorize(requests, self._policies, [])
        level = EscalationLevel.NONE
        for (action, action_level), result in zip(ACTIONS.items(), results, strict=True):
            self._report(result.diagnostics.errors)
            if result.allowed:
                level = max(level, action_level)
                logger.debug("cedar %s on trace %s", action, trace_id)
        return level

    def _report(self, errors: Sequence[str]) -> None:
        """A policy that fails on some traces (a missing attribute) is skipped by Cedar;
        say so once per message instead of on every trace."""
        for error in errors:
            if error not in self._reported and len(self._reported) < 100:
                self._reported.add(error)
                logger.warning("cedar policy error in %s: %s", self.origin, error)


def _request(principal: str, action: str, trace_id: str, context: dict[str, Any]) -> dict:
    return {
        "principal": {"type": "Agent", "id": principal},
        "action": {"type": "Action", "id": action},
        "resource": {"type": "Trace", "id": trace_id},
        "context": context,
    }


def _check_actions(policies_json: str, origin: str) -> None:
    """A policy file with no policy, or one naming a misspelt action (`Action::"dney"`, never
    asked), is refused up front rather than silently deciding nothing."""
    policies = json.loads(policies_json)
    every = {**policies.get("staticPolicies", {}), **policies.get("templates", {})}
    if not every:
        raise PolicyError(f"{origin}: empty: it holds no Cedar policy to apply")
    for name, policy in every.items():
        label = policy.get("annotations", {}).get("id", name)
        scope = policy.get("action", {})
        entities = scope.get("entities") or ([scope["entity"]] if "entity" in scope else [])
        for entity in entities:
            if entity.get("type") != "Action" or entity.get("id") not in KNOWN_ACTIONS:
                raise PolicyError(
                    f"{origin}: policy {label} names {entity.get('type')}::"
                    f'"{entity.get("id")}"; the actions are Action::"deny", '
                    f'Action::"warn" and Action::"allow"'
                )
        _check_decision(policy, f"{origin}: policy {label}")


def _check_decision(policy: dict[str, Any], where: str) -> None:
    """A `@decision` annotation is not what decides here, the action is: one that does not
    say what the policy already does (a `forbid` marked `@decision("deny")` only exempts
    traces from deny, the opposite) is refused rather than loaded to do nothing."""
    decision = policy.get("annotations", {}).get(DECISION_ANNOTATION)
    if decision is None:
        return
    scope = policy.get("action", {})
    acted = scope.get("entity", {}).get("id") if scope.get("op") == "==" else None
    if policy.get("effect") == "permit" and decision in ACTIONS and acted == decision:
        return
    wanted = decision if decision in ACTIONS else "deny"
    raise PolicyError(
        f'{where}: @{DECISION_ANNOTATION}("{decision}") is not read, the policy\'s effect '
        f"and action decide (a forbid only exempts a trace from deny or warn); to "
        f"{wanted} a trace when the condition holds, write it as "
        f'`permit (principal, action == Action::"{wanted}", resource) when {{ ... }};`'
    )


def _read(source: str | os.PathLike[str]) -> tuple[str, str]:
    """(text, origin): a path when it names a file or ends in .cedar, else the text itself."""
    is_path = isinstance(source, os.PathLike) or (
        "\n" not in source and (source.endswith(".cedar") or Path(source).is_file())
    )
    if not is_path:
        return str(source), "<policy text>"
    path = Path(source)
    try:
        return path.read_text(encoding="utf-8"), str(path)
    except (OSError, UnicodeDecodeError) as exc:
        raise PolicyError(f"{path}: cannot read the Cedar policy file: {exc}") from None


def _cedarpy() -> Any:
    try:
        import cedarpy
    except ImportError:
        raise PolicyError(
            f"Cedar policies need the cedarpy package: {install_hint('policy')}"
        ) from None
    return cedarpy
