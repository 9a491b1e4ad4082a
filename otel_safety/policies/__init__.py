"""Escalation policies: the safeguards table, its adaptive variant, and Cedar policies."""

from otel_safety.policies.cedar import CedarPolicy, PolicyError
from otel_safety.policies.safeguards import AdaptivePolicy, SafeguardsPolicy
from otel_safety.policies.safeguards_table import SafeguardsTable
from otel_safety.policies.signals import Signals, combined_signals, finding_signals

__all__ = [
    "AdaptivePolicy",
    "CedarPolicy",
    "PolicyError",
    "SafeguardsPolicy",
    "SafeguardsTable",
    "Signals",
    "combined_signals",
    "finding_signals",
]
