"""Where detectors are found by key: built-ins register on import, users add their own."""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Mapping

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


def create(
    keys: Iterable[str] | None = None, thresholds: Mapping[str, float] | None = None
) -> list[Detector]:
    """Instantiate detectors by key (all registered ones by default)."""
    known = available()
    wanted = sorted(known) if keys is None else list(keys)  # never import order
    unknown = [key for key in wanted if key not in known]
    if unknown:
        raise ValueError(
            f"unknown detector(s) {', '.join(unknown)}; registered: {', '.join(sorted(known))}"
        )
    thresholds = thresholds or {}
    stray = sorted(set(thresholds) - set(wanted))
    if stray:
        raise ValueError(
            f"threshold(s) given for detector(s) not in use: {', '.join(stray)}; "
            f"in use: {', '.join(wanted)}"
        )
    return [known[key](threshold=thresholds.get(key)) for key in wanted]


# Modules whose detectors register themselves on import.
BUILTIN_MODULES = (
    "scope_escalation",
    "injection",
    "impersonation",
    "deception",
    "over_refusal",
    "under_refusal",
    "jailbreak_compliance",
)


def _load_builtins() -> None:
    for module in BUILTIN_MODULES:
        importlib.import_module(f"otel_safety.detectors.{module}")
