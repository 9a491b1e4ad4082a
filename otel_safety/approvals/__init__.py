"""Human approvals as a channel: the guard stores a pending request, a person answers it
from the CLI, `serve`'s HTTP endpoint or the dashboard, and the guard goes on."""

from otel_safety.approvals.store import (
    DEFAULT_TIMEOUT,
    AlreadyDecided,
    Approval,
    ApprovalError,
    ApprovalStore,
    UnknownApproval,
)

__all__ = [
    "DEFAULT_TIMEOUT",
    "AlreadyDecided",
    "Approval",
    "ApprovalError",
    "ApprovalStore",
    "UnknownApproval",
]
