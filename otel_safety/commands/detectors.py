"""`otel-safety detectors [--check | --compile]`: the registered detectors, each built as
configured, or their patterns compiled into the pattern cache ahead of time."""

from __future__ import annotations

import argparse
import sys

from otel_safety import detectors as detector_registry
from otel_safety.analysis.patterns.datafiles import (
    current_data_dir,
    data_folder_line,
    stray_data_files,
)
from otel_safety.behavior import BehaviorMonitor
from otel_safety.behavior.modes import MonitorMode
from otel_safety.bootstrap import build_engine
from otel_safety.config import Settings
from otel_safety.detectors.severity import Ladder, current_ladders
from otel_safety.pattern_warmup import compile_into_cache


def add_commands(sub: argparse._SubParsersAction) -> None:
    listing = sub.add_parser(
        "detectors",
        help="list the registered detectors",
        description="List every registered detector: key, default threshold, what it flags, "
        "and its severity by score (detectors/data/severity.toml, extended by the data "
        "folder); your own detectors too, from the modules OTEL_SAFETY_PLUGINS names and "
        "installed packages' otel_safety.detectors entry points. With --check, build each "
        "one as the pipeline would (data files from "
        "OTEL_SAFETY_DATA_DIR, thresholds, calibration, monitor modes from the environment) "
        "and show the threshold and mode in force; exit 1 naming any that cannot load. "
        "With --compile, compile every pattern of the detectors as configured into the "
        "pattern cache (OTEL_SAFETY_PATTERN_CACHE), as a container image's build or a "
        "host's set-up would: each process started later loads them from there instead of "
        "compiling them at its start and on its first traces.",
    )
    chosen = listing.add_mutually_exclusive_group()
    chosen.add_argument(
        "--check",
        action="store_true",
        help="load every detector's data and settings and report problems",
    )
    chosen.add_argument(
        "--compile",
        action="store_true",
        help="compile every detector pattern into the pattern cache, ahead of time",
    )
    listing.set_defaults(handler=cmd_detectors)


def cmd_detectors(args: argparse.Namespace) -> int:
    if args.check:
        return _check_detectors()
    if args.compile:
        done = compile_into_cache(
            Settings.resolve(),
            lambda path: print(f"compiling every detector pattern into {path} ...", flush=True),
        )
        print(f"compiled {done.patterns:,} detector patterns into {done.path}")
        print("processes started from now on load them from there instead of compiling them")
        return 0
    ladders = current_ladders()
    for key, cls in sorted(detector_registry.available().items()):
        if issubclass(cls, BehaviorMonitor):
            severity = "by mode: " + "; ".join(
                f"{mode} {ladder.describe()}" for mode, ladder in ladders.monitor_modes.items()
            )
        else:
            severity = ladders.detectors.get(key, Ladder.flat(cls.severity)).describe()
            if note := getattr(cls, "severity_note", ""):  # a rule beside the ladder
                severity += f"; {note}"
        print(f"{key:22} threshold {cls.default_threshold:<5} {cls.description}")
        print(f"{'':22} severity {severity}")
    return 0


def _stray_ladders() -> list[str]:
    """Ladders in severity.toml for no detector or mode: a misspelt key ("tool_gaurd") left
    the detector on its packaged ladder, unsaid. Checked once every detector, a plug-in's
    too, is registered."""
    try:
        ladders = current_ladders()
    except ValueError:
        return []  # a broken file is reported by the detectors that read it
    known = set(detector_registry.known())
    modes = {mode.value for mode in MonitorMode}
    return [
        *(
            f"severity.toml [ladders] {key}: no such detector (see `otel-safety detectors`)"
            for key in sorted(set(ladders.detectors) - known)
        ),
        *(
            f"severity.toml [monitor_ladders] {key}: no such monitor mode "
            f"({', '.join(sorted(modes))})"
            for key in sorted(set(ladders.monitor_modes) - modes)
        ),
    ]


def _check_detectors() -> int:
    """Every detector built from the settings in force, one line each; failures named."""
    settings = Settings.resolve()
    failed: list[str] = []
    engine = build_engine(
        settings,
        [],
        background=False,
        on_detector_error=lambda key, exc: failed.append(f"{key}: {exc}"),
    )
    folder = current_data_dir()  # the settings' folder, handed down by build_engine
    if folder:
        print(data_folder_line(folder))
        failed.extend(stray_data_files(folder))
        failed.extend(_stray_ladders())
    if settings.principals:
        print(f"principals file: {settings.principals}")
    calibrated = engine.pipeline.calibrated
    if settings.calibration:
        print(f"calibration file: {settings.calibration}")
    for detector in engine.pipeline.detectors:
        mode = getattr(detector, "mode", None)
        shown = f"mode {mode.value:8}" if mode is not None else " " * 13
        if calibrated is not None:  # which thresholds the file set, and which it left
            shown += "  calibrated" if calibrated.get(detector.key) else "  uncalibrated"
        print(f"{detector.key:22} ok   threshold {detector.threshold:<6} {shown}".rstrip())
    for problem in failed:
        print(f"{problem}", file=sys.stderr)
    print(f"{len(engine.pipeline.detectors)} detector(s) loaded, {len(failed)} problem(s)")
    return 1 if failed else 0
