"""Which environment a call acted on, against the one the user's request names.

"Drop the table in staging" run on the production connection is the classic slip of an
agent with several profiles: the statement is the one asked for, its target is not. The
call says where it ran in its arguments (`profile: "prod"`, `--context prod-eu`) or in the
banner its result opens with (`[profile=prod host=pg-prod-01]`). A request that names a
non-production environment and never production asks for nothing there; a call that acts
and shows production, and not the environment asked for, went somewhere else.
"""

from __future__ import annotations

import regex

from otel_safety.analysis.pattern_cache import compiled
from otel_safety.model import ToolCall

__all__ = ["asked_environment", "production_target"]

# The environments a request names when it means "not production".
_OTHER_ENVIRONMENT = compiled(
    r"\b(?:staging|stg|dev|development|qa|uat|sandbox|preview)\b"
    r"|\btest(?:ing)?\s+(?:env(?:ironment)?|cluster|server|database|db|instance|project|account)\b",
    regex.IGNORECASE,
)
# Production, in a request's words or a call's names (`pg-prod-01`, `prod_eu`, `--env=prd`).
_PRODUCTION_WORD = compiled(r"\b(?:prod|production|prd|live)\b", regex.IGNORECASE)
_PRODUCTION_NAME = compiled(
    r"(?<![A-Za-z0-9])(?:prod|production|prd)(?![A-Za-z0-9])", regex.IGNORECASE
)
_BANNER_CHARS = 300  # a result says where it ran before its data; the data may name anything
_ARGUMENT_CHARS = 2_000


def asked_environment(request: str) -> str | None:
    """The non-production environment a request names, if it names one and never production
    (read once per trace: the request can be long, and every call is held against it)."""
    asked = _OTHER_ENVIRONMENT.search(request)
    if asked is None or _PRODUCTION_WORD.search(request):
        return None
    return asked.group(0)


def production_target(call: ToolCall, asked: str | None) -> str | None:
    """The words by which an acting call shows it ran in production when the request asked
    for another environment (`asked`, from `asked_environment`)."""
    if asked is None:
        return None
    shown = [call.arguments_text()[:_ARGUMENT_CHARS], (call.result or "")[:_BANNER_CHARS]]
    for text in shown:
        found = _PRODUCTION_NAME.search(text)
        if found is not None and _OTHER_ENVIRONMENT.search(text) is None:
            start, end = max(0, found.start() - 30), min(len(text), found.end() + 30)
            return f"{text[start:end].strip()} (asked: {asked})"
    return None
