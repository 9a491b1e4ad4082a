"""What a person is asked about one tool call: a one-line summary, the arguments (secrets
masked, cut), and a fingerprint under which similar requests share an answer."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from opentelemetry import trace

from otel_safety.detectors.base import clip
from otel_safety.guard.verdict import Verdict

DEFAULT_TIMEOUT = 300.0  # seconds a person has to answer (OTEL_SAFETY_APPROVAL_TIMEOUT)
ARGUMENTS_MAX_CHARS = 2000
SUMMARY_MAX_CHARS = 300


@dataclass(frozen=True)
class ApprovalRequest:
    """The call behind a verdict, as the approval channel stores and caches it."""

    arguments: str = ""
    fingerprint: str = ""
    conversation: str | None = None
    trace_id: str | None = None
    span_id: str | None = None


@dataclass(frozen=True)
class Answer:
    """A person's answer (or its absence) about one call, as the audit log keeps it."""

    status: str  # approved | denied | expired
    approval_id: str | None = None  # the stored request answered ("safety-N"), if stored
    decided_by: str | None = None  # who answered: `--by`, the dashboard's user, the callable


def approval_request(arguments: Any, conversation: str | None = None) -> ApprovalRequest:
    """The request for a call being checked now; the trace is the current span's."""
    context = trace.get_current_span().get_span_context()
    return ApprovalRequest(
        arguments=clip(_as_text(arguments), ARGUMENTS_MAX_CHARS),
        fingerprint=fingerprint(arguments),
        conversation=conversation,
        trace_id=format(context.trace_id, "032x") if context.is_valid else None,
        span_id=format(context.span_id, "016x") if context.is_valid else None,
    )


def summary(verdict: Verdict) -> str:
    """One line: who asks for what, and the strongest reason it needs a person."""
    who = verdict.requester or "an unidentified requester"
    why = verdict.reasons[0] if verdict.reasons else "the guard would not decide alone"
    line = f"{who} asks to run {verdict.tool} ({verdict.category}, risk {verdict.risk}): {why}"
    return clip(line, SUMMARY_MAX_CHARS)


def fingerprint(arguments: Any) -> str:
    """Equal for arguments that differ only in key order, JSON encoding or runs of
    whitespace: the same request, asked again, shares its answer. Letter case counts (a
    path or a command may differ by it alone)."""
    canonical = json.dumps(_normalised(_parsed(arguments)), sort_keys=True, default=str)
    return hashlib.sha256(canonical.encode("utf-8", "replace")).hexdigest()[:32]


def _parsed(arguments: Any) -> Any:
    if isinstance(arguments, bytes):
        arguments = arguments.decode("utf-8", "replace")
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except (ValueError, RecursionError):
            return arguments
    return arguments


def _normalised(value: Any) -> Any:
    if isinstance(value, str):
        return " ".join(value.split())
    if isinstance(value, dict):
        return {str(k): _normalised(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_normalised(v) for v in value]
    return value


def _as_text(arguments: Any) -> str:
    if arguments is None:
        return ""
    if isinstance(arguments, str):
        return arguments
    try:
        return json.dumps(arguments, ensure_ascii=False, default=str)
    except ValueError:
        return str(arguments)
