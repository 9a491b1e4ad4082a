"""Agent-safety detectors: pure functions of a trajectory, registered by key.

This package holds the detectors themselves (one module each), their base, registry and
plain-data entry point, and their data files (`data/`). What several of them read of a
text or a call (claims, grants, provenance, refusals, injection rules, pattern indexes) is
shared analysis, in the subpackages of `otel_safety.analysis`. The names below are imported
on first use (`lazy_exports`), so the package imports without the detector base."""

from typing import TYPE_CHECKING

from otel_safety.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from otel_safety.detectors.base import Assessment, Detector
    from otel_safety.detectors.registry import (
        available,
        check,
        create,
        detector_class,
        is_monitor,
        known,
        load_plugins,
        register,
    )

__all__ = [
    "Assessment",
    "Detector",
    "available",
    "check",
    "create",
    "detector_class",
    "is_monitor",
    "known",
    "load_plugins",
    "register",
]

_FROM_BASE = ("Assessment", "Detector")
__getattr__, __dir__ = lazy_exports(
    globals(),
    {
        **dict.fromkeys(_FROM_BASE, "otel_safety.detectors.base"),
        **dict.fromkeys(
            [name for name in __all__ if name not in _FROM_BASE], "otel_safety.detectors.registry"
        ),
    },
)
