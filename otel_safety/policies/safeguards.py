"""The safeguards policy: the table over findings' signals, combined with their severities.

The table itself is data (`detectors/data/safeguards.toml`, extended by the data folder; see
`safeguards_table`). Each finding gets the stricter of its severity's level under
`SeverityPolicy` and the table's level on its own signals; with no signals on any finding
the levels are exactly `SeverityPolicy`'s.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from otel_safety.conversation import ExpiringStore
from otel_safety.model import EscalationLevel, Finding, Severity, Trajectory
from otel_safety.policies.safeguards_table import SafeguardsTable, current_table, load_table
from otel_safety.policies.signals import finding_signals, merged_signals
from otel_safety.policy import SeverityPolicy

logger = logging.getLogger(__name__)


class SafeguardsPolicy:
    """The default policy: the safeguards table over signals, max'd with severity levels.

    Each finding gets the stricter of its severity level and the table on its own signals
    (a detector pinned by `detector_levels` gets its pinned level, and its signals count for
    nothing);
    the trace gets the strictest finding, or the table on the trace's combined signals (max
    of each signal across findings) when that is stricter, since drift seen by one monitor
    and uncertainty seen by another together call for review.
    """

    def __init__(
        self,
        severity_levels: Mapping[Severity | str, EscalationLevel | str] | None = None,
        detector_levels: Mapping[str, EscalationLevel | str] | None = None,
        table: SafeguardsTable | None = None,
    ) -> None:
        self.severity = SeverityPolicy(severity_levels, detector_levels)
        self._table = table

    @property
    def table(self) -> SafeguardsTable:
        """The table given, else the one in force (the data folder's rows included). A data
        folder's table that does not load leaves the packaged one in force for this policy,
        logged once: an app's traces are still judged (`ingest`, `eval` and `detectors
        --check` stop on it at start-up)."""
        if self._table is not None:
            return self._table
        try:
            return current_table()
        except ValueError as exc:
            logger.error("otel-safety safeguards table: %s; the packaged table is used", exc)
            self._table = load_table()  # from now on: the file is not read again
            return self._table

    def table_for(self, trajectory: Trajectory | None) -> SafeguardsTable:
        return self.table

    def decide(
        self, findings: Sequence[Finding], trajectory: Trajectory | None = None
    ) -> EscalationLevel:
        table = self.table_for(trajectory)
        self.severity.decide(findings, trajectory)
        # A detector pinned to a level (`detector_levels`) is at that level, quieter or
        # stricter: its signals raise neither its findings nor the trace.
        pinned = self.severity.detector_levels
        unpinned = [finding for finding in findings if finding.detector not in pinned]
        readings = [finding_signals(finding) for finding in unpinned]  # each read once
        for finding, signals in zip(unpinned, readings, strict=True):
            finding.escalation = max(finding.escalation, table.level(signals))
        worst = max((f.escalation for f in findings), default=EscalationLevel.NONE)
        return max(worst, table.level(merged_signals(readings)))


class AdaptivePolicy(SafeguardsPolicy):
    """The safeguards table with its cut-offs scaled to the context and the conversation.

    Every drift, uncertainty and tool-risk cut-off `t` becomes `min(1, t * factor)` with

        factor = (1.5 - sensitivity) / (risk_multiplier * (1 + history_weight * n))

    where `sensitivity` is 0-1 (0.5 leaves the table as it is, 1 halves every cut-off,
    0 raises them by half), `risk_multiplier` > 0 is the context's risk (2 halves the
    cut-offs: a payments agent; 0.5 doubles them: a sandbox), and `n` is the number of
    earlier traces of the same conversation (`gen_ai.conversation.id`) that reached WARN or
    above, capped at `history_cap`. A violation is a HARD_STOP whatever the factor. The
    history is kept for the last `max_conversations` conversations, an hour after last use.
    """

    def __init__(
        self,
        sensitivity: float = 0.5,
        risk_multiplier: float = 1.0,
        *,
        history_weight: float = 0.1,
        history_cap: int = 5,
        max_conversations: int = 10_000,
        severity_levels: Mapping[Severity | str, EscalationLevel | str] | None = None,
        detector_levels: Mapping[str, EscalationLevel | str] | None = None,
        table: SafeguardsTable | None = None,
    ) -> None:
        for name, value in (("sensitivity", sensitivity), ("risk_multiplier", risk_multiplier)):
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"{name} must be a number, got {value!r}")
        if not 0 <= sensitivity <= 1:
            raise ValueError(f"sensitivity must be between 0 and 1, got {sensitivity!r}")
        if risk_multiplier <= 0:
            raise ValueError(f"risk_multiplier must be above 0, got {risk_multiplier!r}")
        if history_weight < 0 or history_cap < 0 or max_conversations < 1:
            raise ValueError("history_weight and history_cap must be >= 0, max_conversations >= 1")
        super().__init__(severity_levels, detector_levels, table)
        self.sensitivity = sensitivity
        self.risk_multiplier = risk_multiplier
        self.history_weight = history_weight
        self.history_cap = history_cap
        self.max_conversations = max_conversations
        # conversation -> its escalated traces' ids, the latest history_cap + 1 (a trace judged
        # again, after late spans, is counted once); bounded and expiring like monitor state
        self._history: ExpiringStore[dict[str, None]] = ExpiringStore(max_entries=max_conversations)

    def escalations(self, conversation: str | None, current: str | None = None) -> int:
        """Earlier traces of this conversation that reached WARN or above (capped), the
        trace being judged (`current`) left out."""
        if conversation is None:
            return 0
        counted = self._history.peek(conversation) or {}
        return min(sum(trace != current for trace in counted), self.history_cap)

    def factor(self, escalations: int = 0) -> float:
        history = 1 + self.history_weight * min(escalations, self.history_cap)
        return (1.5 - self.sensitivity) / (self.risk_multiplier * history)

    def table_for(self, trajectory: Trajectory | None) -> SafeguardsTable:
        conversation = trajectory.conversation_id if trajectory else None
        current = trajectory.trace_id if trajectory else None
        return self.table.scaled(self.factor(self.escalations(conversation, current)))

    def decide(
        self, findings: Sequence[Finding], trajectory: Trajectory | None = None
    ) -> EscalationLevel:
        level = super().decide(findings, trajectory)
        conversation = trajectory.conversation_id if trajectory else None
        if conversation is not None and trajectory is not None and level >= EscalationLevel.WARN:
            with self._history.lock:
                counted = self._history.get(conversation, dict)
                counted.pop(trajectory.trace_id, None)
                counted[trajectory.trace_id] = None  # the latest last
                while len(counted) > self.history_cap + 1:
                    del counted[next(iter(counted))]
        return level
