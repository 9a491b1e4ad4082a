"""The detector registry knows the built-in detectors without importing them."""

from __future__ import annotations

import pytest

from otel_safety.behavior.monitor import BehaviorMonitor
from otel_safety.detectors import registry
from otel_safety.detectors.base import Detector


def test_the_table_of_built_ins_is_what_their_modules_register():
    classes = registry.available()
    built_in = {
        key: cls for key, cls in classes.items() if cls.__module__.startswith("otel_safety.")
    }
    assert sorted(built_in) == sorted(registry.BUILTINS)
    for key, (module, monitor) in registry.BUILTINS.items():
        assert built_in[key].__module__ == module, key
        assert issubclass(built_in[key], BehaviorMonitor) is monitor, key
        assert registry.is_monitor(key) is monitor, key


def test_a_detector_registered_by_the_user_is_checked_built_and_told_apart(monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))

    @registry.register
    class Shouting(Detector):
        key = "shouting"
        default_threshold = 0.5
        description = "answers in capitals"

    assert "shouting" in registry.known()
    assert registry.check(["shouting", "injection"]) == ["shouting", "injection"]
    assert registry.is_monitor("shouting") is False
    assert registry.detector_class("shouting") is Shouting
    with pytest.raises(ValueError, match=r"unknown detector.*whispering"):
        registry.check(["whispering"])
