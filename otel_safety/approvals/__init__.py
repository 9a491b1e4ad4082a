"""Human approvals as a channel: the guard stores a pending request, a person answers it
from the CLI, `serve`'s HTTP endpoint or the dashboard, and the guard goes on.

The names below load on first use: the guard imports `approvals.request` while the store
module (which needs the DuckDB exporter, which needs the guard) may still be loading.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from otel_safety.approvals.channel import ApprovalChannel
    from otel_safety.approvals.store import (
        DEFAULT_TIMEOUT,
        AlreadyDecided,
        Approval,
        ApprovalError,
        ApprovalStore,
        UnknownApproval,
    )

_WHERE = {
    "ApprovalChannel": "otel_safety.approvals.channel",
    "DEFAULT_TIMEOUT": "otel_safety.approvals.store",
    "AlreadyDecided": "otel_safety.approvals.store",
    "Approval": "otel_safety.approvals.store",
    "ApprovalError": "otel_safety.approvals.store",
    "ApprovalStore": "otel_safety.approvals.store",
    "UnknownApproval": "otel_safety.approvals.store",
}

__all__ = [
    "DEFAULT_TIMEOUT",
    "AlreadyDecided",
    "Approval",
    "ApprovalChannel",
    "ApprovalError",
    "ApprovalStore",
    "UnknownApproval",
]


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'otel_safety.approvals' has no attribute {name!r}")
    return getattr(import_module(_WHERE[name]), name)
