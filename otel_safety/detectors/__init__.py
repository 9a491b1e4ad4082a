"""Agent-safety detectors: pure functions of a trajectory, registered by key.

The names below are imported on first use (`lazy_exports`), so the helper modules of this
package (its regex parse tree, its data files) import without the detector base."""

from typing import TYPE_CHECKING

from otel_safety.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from otel_safety.detectors.base import Detector
    from otel_safety.detectors.registry import (
        available,
        check,
        create,
        detector_class,
        is_monitor,
        known,
        register,
    )

__all__ = [
    "Detector",
    "available",
    "check",
    "create",
    "detector_class",
    "is_monitor",
    "known",
    "register",
]

__getattr__, __dir__ = lazy_exports(
    globals(),
    {
        "Detector": "otel_safety.detectors.base",
        **dict.fromkeys(
            ("available", "check", "create", "detector_class", "is_monitor", "known", "register"),
            "otel_safety.detectors.registry",
        ),
    },
)
