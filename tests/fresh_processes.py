"""Run a snippet in fresh Python processes that share one pattern cache: what a later
process reads of the cache an earlier one left."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any


def json_of_runs(script: str, cache: Path, *args: str, runs: int = 2) -> list[Any]:
    """The JSON each of `runs` processes printed, one after the other, run in turn with
    `OTEL_SAFETY_PATTERN_CACHE` set to `cache`."""
    env = {**os.environ, "OTEL_SAFETY_PATTERN_CACHE": str(cache)}
    return [
        json.loads(
            subprocess.run(
                [sys.executable, "-c", script, *args],
                env=env,
                capture_output=True,
                text=True,
                check=True,
                timeout=120,
            ).stdout
        )
        for _ in range(runs)
    ]
