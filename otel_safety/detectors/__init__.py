"""Agent-safety detectors: pure functions of a trajectory, registered by key."""

from otel_safety.detectors.base import Detector
from otel_safety.detectors.registry import available, check, create, register

__all__ = ["Detector", "available", "check", "create", "register"]
