"""Where detectors are found by key: built-ins register on import, users add their own.

A user's detector is a class registered with `@register` in a module of theirs. Every
process that judges must import that module: the app's or command's own, and the detection
processes it starts. So a plug-in module is named once, and each process imports it:
- in `OTEL_SAFETY_PLUGINS` (comma-separated modules; commands and children read it),
  or `configure(plugins=[...])`;
- as an `otel_safety.detectors` entry point of an installed package;
- or by importing it in the app before `configure()`: the detection processes are then told
  of it (`plugin_modules`), unless it is the app's `__main__`, which no other process can
  import (`main_detectors`).
"""

from __future__ import annotations

import importlib
import os
import sys
import traceback
from collections.abc import Callable, Iterable, Mapping
from importlib.metadata import entry_points
from typing import Any

from otel_safety.config import env_name
from otel_safety.detectors.base import Detector

PLUGINS_ENV = env_name("plugins")
ENTRY_POINT_GROUP = "otel_safety.detectors"

_REGISTRY: dict[str, type[Detector]] = {}
_loaded: set[str] = set()  # plug-in modules imported
_entry_points: list[str] | None = None  # once read: why installed plug-ins did not load


def register(cls: type[Detector]) -> type[Detector]:
    """Class decorator: make a detector available by its key."""
    if not getattr(cls, "key", None):
        raise ValueError(f"{cls.__name__} needs a `key` to be registered")
    if not isinstance(getattr(cls, "default_threshold", None), int | float):
        raise ValueError(
            f"{cls.__name__} needs a `default_threshold` (the score from which it fires, "
            "0.5 say) to be registered"
        )
    builtin = BUILTINS.get(cls.key)
    if builtin is not None and cls.__module__ != builtin[0]:
        raise ValueError(
            f"{cls.__name__} takes the key {cls.key!r} of a built-in detector; give it a key "
            "of its own (`otel-safety detectors` lists those taken)"
        )
    held = _REGISTRY.get(cls.key)
    if held is not None and held.__module__ != cls.__module__ and builtin is None:
        raise ValueError(
            f"two detectors registered the key {cls.key!r}: {held.__module__}.{held.__name__} "
            f"and {cls.__module__}.{cls.__name__}; give one a key of its own"
        )
    _REGISTRY[cls.key] = cls
    return cls


def load_plugins(modules: Iterable[str] = ()) -> None:
    """Import the plug-in modules named here, in `OTEL_SAFETY_PLUGINS` and by installed
    packages' entry points (each once per process), so their detectors are registered."""
    named = [
        part for given in [*modules, os.environ.get(PLUGINS_ENV) or ""] for part in given.split(",")
    ]
    for module in dict.fromkeys(name.strip() for name in named if name.strip()):
        if module in _loaded:
            continue
        try:
            importlib.import_module(module)
        except Exception as exc:
            raise ValueError(
                f"detector plug-in module {module!r} (named by plugins= or {PLUGINS_ENV}) "
                f"{_failed(exc, module)}"
            ) from exc
        _loaded.add(module)
    global _entry_points
    if _entry_points is None:
        _entry_points = []
        for point in entry_points(group=ENTRY_POINT_GROUP):
            try:
                point.load()
            except Exception as exc:  # an installed plug-in, meant to judge: stop as for one named
                _entry_points.append(
                    f"detector plug-in {point.value} (the {ENTRY_POINT_GROUP} entry point "
                    f"{point.name!r} of an installed package) {_failed(exc, point.module)}"
                )
    if _entry_points:  # said every time asked, not only the first
        raise ValueError("; ".join(_entry_points))


def _failed(exc: Exception, module: str) -> str:
    """Why a plug-in did not load, in words that say where to look."""
    if isinstance(exc, ModuleNotFoundError) and exc.name and module.startswith(exc.name):
        return "was not found: is it installed, or its folder on PYTHONPATH?"
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
    return f"failed to import: {type(exc).__name__}: {exc}{where}"


def plugin_modules() -> list[str]:
    """The modules of the users' detectors registered in this process, which a detection
    process must import too (the app's `__main__` aside: see `main_detectors`)."""
    builtin = {module for module, _ in BUILTINS.values()}
    modules = {cls.__module__ for cls in _REGISTRY.values()} - builtin - {"__main__"}
    return sorted(modules)


def plugin_paths() -> list[str]:
    """The folders `plugin_modules` were imported from (a module beside the app's script is
    found through the script's folder, which a child started elsewhere does not search)."""
    paths = []
    for name in plugin_modules():
        module = sys.modules.get(name)
        file = getattr(module, "__file__", None)
        if file is None:
            continue
        folder = os.path.dirname(os.path.abspath(file))
        for _ in range(name.count(".") + (os.path.basename(file) == "__init__.py")):
            folder = os.path.dirname(folder)
        paths.append(folder)
    return sorted(set(paths))


def main_detectors(keys: Iterable[str]) -> list[str]:
    """The keys whose class the app's `__main__` defines: no other process can import it,
    so they judge in the app's process."""
    return sorted(k for k in keys if k in _REGISTRY and _REGISTRY[k].__module__ == "__main__")


def available() -> dict[str, type[Detector]]:
    """Every detector class by key, built-in ones imported."""
    load_plugins()
    for module, _ in BUILTINS.values():
        importlib.import_module(module)
    return dict(_REGISTRY)


def known() -> list[str]:
    """Every detector key, without importing a built-in detector: checking settings (as an
    app judging in a worker process does) loads none of them."""
    load_plugins()
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
    """The detector keys to run, after checking them and their thresholds (cheap): those
    named, or, when every key is named with a leading '-', all the others."""
    names = known()
    asked = None if keys is None else list(keys)
    left_out = [key[1:] for key in asked or () if key.startswith("-")]
    if left_out and len(left_out) < len(asked or ()):
        raise ValueError(
            "name the detectors to run ('injection,tool_guard') or those to leave out, each "
            f"with a leading '-' ('-over_refusal'), not both: got {','.join(asked or ())}"
        )
    unknown = [key for key in (left_out or asked or ()) if key not in names]
    if unknown:
        raise ValueError(
            f"unknown detector(s) {', '.join(unknown)}; registered: {', '.join(names)}"
        )
    everything = asked is None or left_out  # in key order, never import order
    wanted = [key for key in names if key not in left_out] if everything else asked
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
