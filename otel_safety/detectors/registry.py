"""Where detectors are found by key: built-ins register on import, users add their own."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from otel_safety.detectors.base import Detector

_REGISTRY: dict[str, type[Detector]] = {}


def register(cls: type[Detector]) -> type[Detector]:
    """Class decorator: make a detector available by its key."""
    if not getattr(cls, "key", None):
        raise ValueError(f"{cls.__name__} needs a `key` to be registered")
    _REGISTRY[cls.key] = cls
    return cls


def available() -> dict[str, type[Detector]]:
    _load_builtins()
    return dict(_REGISTRY)


def check(
    keys: Iterable[str] | None = None, thresholds: Mapping[str, float] | None = None
) -> list[str]:
    """The detector keys to run, after checking them and their thresholds (cheap)."""
    known = available()
    wanted = sorted(known) if keys is None else list(keys)  # never import order
    unknown = [key for key in wanted if key not in known]
    if unknown:
        raise ValueError(
            f"unknown detector(s) {', '.join(unknown)}; registered: {', '.join(sorted(known))}"
        )
    stray = sorted(set(thresholds or {}) - set(wanted))
    if stray:
        raise ValueError(
            f"threshold(s) given for detector(s) not in use: {', '.join(stray)}; "
            f"in use: {', '.join(wanted)}"
        )
    return wanted


def create(
    keys: Iterable[str] | None = None,
    thresholds: Mapping[str, float] | None = None,
    on_error: Callable[[str, Exception], None] | None = None,
    options: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[Detector]:
    """Instantiate detectors by key (all registered ones by default).

    Construction compiles each detector's data. A failure raises, unless `on_error` is
    given: then it is reported there and that detector is left out (the in-process
    processor fails open rather than stop judging altogether). `options` are extra keyword
    arguments per detector key (the guard's principals file, say).
    """
    known = available()
    thresholds = thresholds or {}
    detectors = []
    for key in check(keys, thresholds):
        try:
            extra = dict((options or {}).get(key, {}))
            detectors.append(known[key](threshold=thresholds.get(key), **extra))
        except Exception as exc:
            if on_error is None:
                raise
            on_error(key, exc)
    return detectors


# Modules whose detectors register themselves on import.
BUILTIN_MODULES = (
    "scope_escalation",
    "injection",
    "impersonation",
    "deception",
    "over_refusal",
    "under_refusal",
    "jailbreak_compliance",
    "tool_guard",
    "request_claims",
    "intent_risk",
    "topic_drift",
    "outcome_check",
    "record_disclosure",
)
# Agent-behaviour monitors, which live in their own package.
BEHAVIOR_MODULES = ("sandbagging", "behavior_drift", "ethics_boundary", "agent_deception")


def _load_builtins() -> None:
    for module in BUILTIN_MODULES:
        importlib.import_module(f"otel_safety.detectors.{module}")
    for module in BEHAVIOR_MODULES:
        importlib.import_module(f"otel_safety.behavior.{module}")
