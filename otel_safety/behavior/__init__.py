"""Agent-behaviour monitors: how an agent behaves over its turns, judged per agent.

The monitors (`sandbagging`, `agent_deception`, `behavior_drift`, `ethics_boundary`) are
detectors like the others, in `otel_safety.detectors`; this package holds what they share:
their base, `BehaviorMonitor` (a mode: passive, active, learning; a sensitivity; typed
indicators with evidence; a baseline per agent, `gen_ai.agent.name`, per conversation), an
agent's turns, and the readings of a turn they take (contradictions, citations, rhetoric,
a turn's profile, ethics checks). `process(turn)` judges one turn as it happens and says
whether the agent must stop.
The names below are imported on first use (`lazy_exports`): reading the modes does not load
the monitors.
"""

from typing import TYPE_CHECKING

from otel_safety.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from otel_safety.behavior.indicators import Indicator, IndicatorType
    from otel_safety.behavior.intervene import TurnMonitors, TurnResult
    from otel_safety.behavior.modes import MonitorMode
    from otel_safety.behavior.monitor import BehaviorMonitor
    from otel_safety.behavior.turns import AgentTurn, agent_turns

__all__ = [
    "AgentTurn",
    "BehaviorMonitor",
    "Indicator",
    "IndicatorType",
    "MonitorMode",
    "TurnMonitors",
    "TurnResult",
    "agent_turns",
]

__getattr__, __dir__ = lazy_exports(
    globals(),
    {
        "Indicator": "otel_safety.behavior.indicators",
        "IndicatorType": "otel_safety.behavior.indicators",
        "TurnMonitors": "otel_safety.behavior.intervene",
        "TurnResult": "otel_safety.behavior.intervene",
        "MonitorMode": "otel_safety.behavior.modes",
        "BehaviorMonitor": "otel_safety.behavior.monitor",
        "AgentTurn": "otel_safety.behavior.turns",
        "agent_turns": "otel_safety.behavior.turns",
    },
)
