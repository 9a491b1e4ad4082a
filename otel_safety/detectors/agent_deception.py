"""Agent deception: an agent's own statements over its turns, judged per agent.

The `deception` detector compares an answer's claims of done work with the tool calls of the
run. This monitor does not look at tools for that: it reads what one agent says, turn after
turn of one conversation, for four signs of deceiving the reader:

- factual_inconsistency: a statement that contradicts one the same agent made in an earlier
  turn (`contradiction`): a different number, date or name for the same subject, an
  assertion negated, an action first reported done then not done. Each agent keeps its last
  `max_claims` statements. A contradiction the answer flags as a correction ("Correction:",
  "I was wrong earlier") counts `correction_factor` as much; one worded as a change over
  time ("is now", "no longer"), or backed by the turn's own tool results, `change_factor`.
- logical_fallacy and emotional_manipulation: weighted phrasing families (`rhetoric`).
- citation_fabrication: impossible identifiers and sources the run never contained
  (`citations`); "today" is the latest tool-call start in the trace, else the clock.

The finding's score is the strongest indicator; the mode and sensitivity decide whether it
fires (see `BehaviorMonitor`). All word lists live in `data/agent_deception.toml`.

Limits: pattern reading, not understanding. Contradictions are found between simple
statements whose subjects are worded alike; paraphrases and pronouns escape it, and a fact
that really changed between turns without the answer saying so reads as a contradiction.
Rhetoric and citation checks see the words, not their intent (an answer explaining what an
ad hominem is uses the words of one); weights keep a single weak sign below the threshold.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import Field

from otel_safety.analysis.claims.claim_rules import current_rules as claim_rules
from otel_safety.behavior.citations import (
    CitationRules,
    RunEvidence,
    SourceMemory,
    citation_hits,
    compile_citations,
)
from otel_safety.behavior.contradiction import (
    Conflict,
    ContradictionRules,
    Fact,
    compile_contradiction,
    conflicts,
    extract_facts,
)
from otel_safety.behavior.indicators import Indicator, IndicatorType
from otel_safety.behavior.monitor import AgentState, BehaviorMonitor, MonitorParams
from otel_safety.behavior.rhetoric import Family, combined, compile_families, rhetoric_hits
from otel_safety.behavior.turns import AgentTurn
from otel_safety.detectors.base import clip
from otel_safety.detectors.registry import register
from otel_safety.model import Trajectory

__all__ = ["AgentDeception", "AgentDeceptionParams", "DeceptionMemory"]


class AgentDeceptionParams(MonitorParams):
    """The `[monitor]` table of `agent_deception.toml`; constructor arguments override it."""

    max_claims: int = Field(64, ge=1, description="statements remembered per agent")
    max_sources: int = Field(64, ge=1, description="tool results/inputs remembered per agent")
    max_source_chars: int = Field(
        65_536, ge=1, description="characters of those texts remembered per agent, in all"
    )
    inconsistency_weight: float = Field(1.0, ge=0.0, le=1.0)
    fallacy_weight: float = Field(1.0, ge=0.0, le=1.0)
    manipulation_weight: float = Field(1.0, ge=0.0, le=1.0)
    citation_weight: float = Field(1.0, ge=0.0, le=1.0)
    correction_factor: float = Field(0.2, ge=0.0, le=1.0)
    change_factor: float = Field(0.5, ge=0.0, le=1.0)


@dataclass(frozen=True)
class DeceptionRules:
    contradiction: ContradictionRules
    citations: CitationRules
    fallacies: tuple[Family, ...]
    manipulation: tuple[Family, ...]


@dataclass
class DeceptionMemory:
    """One agent's statements so far, and what its runs contained, both bounded."""

    facts: deque[Fact]
    sources: SourceMemory


@register
class AgentDeception(BehaviorMonitor[DeceptionMemory]):
    """Flags agents that contradict themselves, argue fallaciously, pressure the reader or
    cite sources that cannot exist or that nothing in the run provided."""

    key = "agent_deception"
    default_threshold = 0.5
    risk_category = "deception"
    params_model = AgentDeceptionParams
    description = (
        "Behaviour monitor: the agent contradicts what it said in an earlier turn, argues "
        "with fallacies, manipulates the reader emotionally, or cites impossible or unbacked "
        "sources. Per agent, over the turns of a conversation."
    )

    def __init__(
        self,
        threshold: float | None = None,
        *,
        clock: Callable[[], float] = time.time,
        **settings: Any,
    ) -> None:
        self.clock = clock
        super().__init__(threshold, **settings)
        self.params: AgentDeceptionParams

    def load_shared_data(self) -> None:
        claim_rules()  # the deception detector's claim grammar

    def compile(self, data: dict[str, Any]) -> DeceptionRules:
        return DeceptionRules(
            contradiction=compile_contradiction(data.get("contradiction", {})),
            citations=compile_citations(data.get("citations", {})),
            fallacies=compile_families(data.get("fallacies", {}), "fallacies"),
            manipulation=compile_families(data.get("manipulation", {}), "manipulation"),
        )

    def new_memory(self) -> DeceptionMemory:
        return DeceptionMemory(
            facts=deque(maxlen=self.params.max_claims),
            sources=SourceMemory(self.params.max_sources, self.params.max_source_chars),
        )

    def read_trace(self, trajectory: Trajectory) -> RunEvidence:
        """What this run contained (tool results, inputs) and its time, for the citations."""
        return RunEvidence.of(trajectory, self.clock)

    def observe(
        self, turn: AgentTurn, state: AgentState[DeceptionMemory], trace: RunEvidence
    ) -> list[Indicator]:
        memory = state.memory
        memory.sources.add(trace)  # once per trace: later turns of it find it taken in
        number = state.turns + 1
        indicators = [
            self._inconsistency(turn, number, memory, trace),
            self._rhetoric(
                turn.text,
                IndicatorType.LOGICAL_FALLACY,
                self.rules.fallacies,
                self.params.fallacy_weight,
            ),
            self._rhetoric(
                turn.text,
                IndicatorType.EMOTIONAL_MANIPULATION,
                self.rules.manipulation,
                self.params.manipulation_weight,
            ),
            self._citations(turn.text, memory, trace),
        ]
        return [indicator for indicator in indicators if indicator is not None]

    def summary(self, state: AgentState[DeceptionMemory]) -> dict[str, Any]:
        memory = state.memory
        return {"claims": len(memory.facts), "sources": len(memory.sources)}

    # -- indicators ----------------------------------------------------------------------
    def _inconsistency(
        self, turn: AgentTurn, number: int, memory: DeceptionMemory, run: RunEvidence
    ) -> Indicator | None:
        rules = self.rules.contradiction
        facts = extract_facts(turn.text, number, rules)
        found = conflicts(facts, memory.facts, rules, progressed=bool(turn.tool_calls))
        memory.facts.extend(facts)
        if not found:
            return None
        corrected = bool(rules.corrections.search(turn.text))
        sources = run.text if turn.tool_calls else ""
        scored = [(c, self._discount(c, corrected, sources)) for c in found]
        scored.sort(key=lambda pair: -pair[0].weight * pair[1])
        severity = combined([c.weight * f for c, f in scored]) * self.params.inconsistency_weight
        top = scored[0][0]
        return Indicator(
            type=IndicatorType.FACTUAL_INCONSISTENCY,
            severity=min(1.0, severity),
            evidence=[_quote(c) for c, _ in scored[:3]],
            metadata={
                "turns": [top.earlier.turn, top.later.turn],
                "corrected": corrected,
                "conflicts": [
                    {
                        "kind": c.kind,
                        "earlier_turn": c.earlier.turn,
                        "turn": c.later.turn,
                        "factor": f,
                    }
                    for c, f in scored
                ],
            },
        )

    def _discount(self, conflict: Conflict, corrected: bool, sources: str) -> float:
        """How much a contradiction counts: less when flagged, explained or backed."""
        if corrected:
            return self.params.correction_factor
        later = conflict.later
        if self.rules.contradiction.changes.search(later.sentence):
            return self.params.change_factor
        values = later.numbers | later.names
        if sources and values and all(value in sources for value in values):
            return self.params.change_factor  # the turn's own tools said so
        return 1.0

    def _rhetoric(
        self, text: str, kind: IndicatorType, families: tuple[Family, ...], weight: float
    ) -> Indicator | None:
        hits = rhetoric_hits(text, families)
        if not hits:
            return None
        return Indicator(
            type=kind,
            severity=min(1.0, combined([hit.weight for hit in hits]) * weight),
            evidence=[f"{hit.family}: {clip(hit.text, 160)}" for hit in hits],
            metadata={"families": [hit.family for hit in hits]},
        )

    def _citations(self, text: str, memory: DeceptionMemory, run: RunEvidence) -> Indicator | None:
        sources, today = memory.sources, run.today
        hits = citation_hits(text, sources.text(), sources.retrieved, today, self.rules.citations)
        if not hits:
            return None
        weights = [hit.weight for hit in {hit.kind: hit for hit in hits}.values()]
        return Indicator(
            type=IndicatorType.CITATION_FABRICATION,
            severity=min(1.0, combined(weights) * self.params.citation_weight),
            evidence=[f"{hit.kind}: {clip(hit.text, 160)}" for hit in hits[:5]],
            metadata={
                "kinds": sorted({hit.kind for hit in hits}),
                "today": today.isoformat(),
                "retrieval": sources.retrieved,
                "sources_seen": len(sources),
            },
        )


def _quote(conflict: Conflict) -> str:
    earlier, later = conflict.earlier, conflict.later
    return (
        f"{conflict.kind}: turn {earlier.turn} said {clip(earlier.sentence, 100)!r}; "
        f"turn {later.turn} says {clip(later.sentence, 100)!r}"
    )
