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
    """Every detector class by key, built-in ones imported."""
    for module, _ in BUILTINS.values():
        importlib.import_module(module)
    return dict(_REGISTRY)


def known() -> list[str]:
    """Every detector key, without importing a built-in detector: checking settings (as an
    app judging in a worker process does) loads none of them."""
    return sorted({*BUILTINS, *_REGISTRY})


def detector_class(key: str) -> type[Detector]:
    """The class registered under `key`, its built-in module imported if need be."""
    if key in BUILTINS:
        importlib.import_module(BUILTINS[key][0])
    return _REGISTRY[key]


def is_monitor(key: str) -> bool:
    """Whether `key` is a behaviour monitor (it then takes a mode), read off the table for a
    built-in detector, so that nothing is imported to tell."""
    cls = _REGISTRY.get(key)
    if key in BUILTINS and (cls is None or cls.__module__ == BUILTINS[key][0]):
        return BUILTINS[key][1]
    from otel_safety.behavior.monitor import BehaviorMonitor

    return cls is not None and issubclass(cls, BehaviorMonitor)


def check(
    keys: Iterable[str] | None = None, thresholds: Mapping[str, float] | None = None
) -> list[str]:
    """The detector keys to run, after checking them and their thresholds (cheap)."""
    names = known()
    wanted = names if keys is None else list(keys)  # never import order
    unknown = [key for key in wanted if key not in names]
    if unknown:
        raise ValueError(
            f"unknown detector(s) {', '.join(unknown)}; registered: {', '.join(names)}"
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
    thresholds = thresholds or {}
    detectors = []
    for key in check(keys, thresholds):
        try:
            extra = dict((options or {}).get(key, {}))
            detectors.append(detector_class(key)(threshold=thresholds.get(key), **extra))
        except Exception as exc:
            if on_error is None:
                raise
            on_error(key, exc)
    return detectors


# Built-in detectors by key: the module that registers each on import, and whether it is a
# behaviour monitor. Known without importing them (`tests/test_registry.py` holds this table
# to what the modules register).
BUILTINS: dict[str, tuple[str, bool]] = {
    **{
        key: (f"otel_safety.detectors.{module}", False)
        for key, module in (
            ("scope_escalation", "scope_escalation"),
            ("injection", "injection"),
            ("impersonation_risk", "impersonation"),
            ("deception", "deception"),
            ("over_refusal", "over_refusal"),
            ("under_refusal", "under_refusal"),
            ("jailbreak_compliance", "jailbreak_compliance"),
            ("tool_guard", "tool_guard"),
            ("request_claims", "request_claims"),
            ("intent_risk", "intent_risk"),
            ("topic_drift", "topic_drift"),
            ("outcome_check", "outcome_check"),
            ("record_disclosure", "record_disclosure"),
        )
    },
    **{
        key: (f"otel_safety.detectors.{key}", True)
        for key in ("sandbagging", "behavior_drift", "ethics_boundary", "agent_deception")
    },
}
