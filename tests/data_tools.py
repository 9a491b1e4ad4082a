"""Running a `tools/` script on the labelled data, as a user runs it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

TOOLS = Path(__file__).resolve().parents[1] / "tools"


def run_tool(name: str, data: Path, *args: str, timeout: float = 300) -> str:
    """What `tools/<name> --data <data> [args]` prints; it must exit 0."""
    done = subprocess.run(
        [sys.executable, str(TOOLS / name), "--data", str(data), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout
