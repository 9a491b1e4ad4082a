"""Tool-call guard: judge a call by what it does and who asked, before it runs or on traces.

The names below are imported on first use (`lazy_exports`), so a module of this package
(the signing of approvals, say) can be imported without the guard's rules and data."""

from typing import TYPE_CHECKING

from otel_safety.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from otel_safety.guard.guard import Guard
    from otel_safety.guard.principals import (
        Directory,
        Principal,
        PrincipalsError,
        Requester,
        Role,
    )
    from otel_safety.guard.verdict import Decision, RuleHit, Verdict

__all__ = [
    "Decision",
    "Directory",
    "Guard",
    "Principal",
    "PrincipalsError",
    "Requester",
    "Role",
    "RuleHit",
    "Verdict",
]

__getattr__, __dir__ = lazy_exports(
    globals(),
    {
        "Guard": "otel_safety.guard.guard",
        **dict.fromkeys(
            ("Directory", "Principal", "PrincipalsError", "Requester", "Role"),
            "otel_safety.guard.principals",
        ),
        **dict.fromkeys(("Decision", "RuleHit", "Verdict"), "otel_safety.guard.verdict"),
    },
)
