"""The calibration file: written by `otel-safety calibrate`, read by the detectors at start.

Only two things per detector drive the live pipeline: `threshold` and `calibrated` (whether
it passed the quality gate). Everything else in the file (figures, gate, provenance) is the
record of why. A file that cannot be used raises `CalibrationError` naming the file and the
problem: a threshold silently ignored would be worse than a refusal to start.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from otel_safety.config import ConfigError, env_name

if TYPE_CHECKING:
    from otel_safety.calibration.run import Calibration

FORMAT = "otel-safety-calibration"
FORMAT_VERSION = 1

ENV_VAR = env_name("calibration")
DEFAULT_FILE = "otel-safety-calibration.json"


class CalibrationError(ConfigError):
    """A calibration file cannot be used; the message names the file and the problem."""


@dataclass(frozen=True)
class DetectorEntry:
    threshold: float | None
    calibrated: bool


@dataclass(frozen=True)
class CalibrationFile:
    path: str
    created_at: str
    detectors: Mapping[str, DetectorEntry]

    def thresholds(self, keys: Iterable[str]) -> dict[str, float]:
        """Calibrated thresholds of the detectors in use that passed the gate."""
        return {
            key: entry.threshold
            for key in keys
            if (entry := self.detectors.get(key))
            and entry.calibrated
            and entry.threshold is not None
        }

    def marks(self, keys: Iterable[str], explicit: Mapping[str, float]) -> dict[str, bool]:
        """Per detector in use: calibrated, i.e. it passed the gate and runs at the threshold
        the gate judged. A detector without labels, one that failed, or one whose threshold
        was set by hand to another value is uncalibrated."""
        calibrated = self.thresholds(keys)
        return {
            key: key in calibrated and explicit.get(key, calibrated[key]) == calibrated[key]
            for key in keys
        }


def in_use(path: str | Path, keys: Iterable[str], explicit: Mapping[str, float]) -> str:
    """One line for a command's output: which file the thresholds come from and which
    detectors it calibrates, so figures and findings can be told apart from the defaults'."""
    marks = load_calibration(path).marks(list(keys), explicit)
    done = sorted(key for key, calibrated in marks.items() if calibrated)
    listed = f": {', '.join(done)}" if done else ""
    return f"calibration {Path(path).resolve()}: {len(done)} of {len(marks)} detectors{listed}"


def write_calibration(calibration: Calibration, path: str | Path) -> None:
    """Write atomically, so a detector starting meanwhile never reads half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(calibration.as_dict(), indent=2, ensure_ascii=False) + "\n"
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def load_calibration(path: str | Path) -> CalibrationFile:
    """Read and check a calibration file."""
    where = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CalibrationError(
            f"calibration file {where} not found (make one with `otel-safety calibrate`)"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise CalibrationError(f"calibration file {where} cannot be read: {exc}") from None
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CalibrationError(
            f"calibration file {where} is not JSON: {exc.msg} (line {exc.lineno}, "
            f"column {exc.colno})"
        ) from None
    return _parse(document, where)


def _parse(document: Any, where: str) -> CalibrationFile:
    def fail(problem: str) -> CalibrationError:
        return CalibrationError(f"calibration file {where}: {problem}")

    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise fail(f'not an otel-safety calibration file (expected "format": "{FORMAT}")')
    version = document.get("version")
    if version != FORMAT_VERSION:
        raise fail(
            f"version {version!r} is not supported (this otel-safety reads version "
            f"{FORMAT_VERSION}); run `otel-safety calibrate` again"
        )
    detectors = document.get("detectors")
    if not isinstance(detectors, dict):
        raise fail('"detectors" must be an object of detector key -> entry')
    entries = {}
    for key, entry in detectors.items():
        if not isinstance(entry, dict):
            raise fail(f"detectors.{key} must be an object")
        threshold = entry.get("threshold")
        if threshold is not None and (
            isinstance(threshold, bool)
            or not isinstance(threshold, int | float)
            or not math.isfinite(threshold)
            or not 0.0 <= threshold <= 1.0
        ):
            raise fail(f"detectors.{key}.threshold must be a number from 0 to 1, got {threshold!r}")
        calibrated = entry.get("calibrated")
        if not isinstance(calibrated, bool):
            raise fail(f"detectors.{key}.calibrated must be true or false, got {calibrated!r}")
        if calibrated and threshold is None:
            raise fail(f"detectors.{key} is calibrated but has no threshold")
        entries[key] = DetectorEntry(None if threshold is None else float(threshold), calibrated)
    return CalibrationFile(where, str(document.get("created_at", "")), entries)
