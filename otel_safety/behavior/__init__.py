"""Agent-behaviour monitors: how an agent behaves over its turns, judged per agent.

The detectors here (`sandbagging`, `agent_deception`, `behavior_drift`, `ethics_boundary`)
share one base, `BehaviorMonitor`: a mode (passive, active, learning), a sensitivity, typed
indicators with evidence, and a baseline per agent (`gen_ai.agent.name`) per conversation.
`process(turn)` judges one turn as it happens and says whether the agent must stop.
"""

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
