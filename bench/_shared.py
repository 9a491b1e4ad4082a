"""What the benchmarks share: their `--help` text, argument checks, a child's environment.

Not a benchmark itself (the Makefile runs every `bench_*.py`).
"""

from __future__ import annotations

import argparse
import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

# The one OTEL_* variable a child keeps from the caller: where compiled patterns are kept
# only makes a first start cheaper, it changes no figure's meaning.
_KEPT = ("OTEL_SAFETY_PATTERN_CACHE",)


def description(doc: str | None) -> str:
    """A script's `--help` description: its docstring's whole first paragraph, on one line."""
    return " ".join((doc or "").split("\n\n", 1)[0].split())


def at_least_one(text: str) -> int:
    """An argparse `type` for counts of rounds, repeats and the like: an int of 1 or more."""
    number = int(text)
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {number}")
    return number


def require_data(parser: argparse.ArgumentParser, data: Path, otherwise: str = "") -> Path:
    """`data` if it holds the AgentDojo runs the benchmarks read, else a usage error that says
    what to pass (the labelled data is not part of the repository); `otherwise` names
    another way the bench takes its input."""
    if not (Path(data) / "agentdojo").is_dir():
        parser.error(f"no agentdojo/ folder in {data}: pass --data /path/to/shared/data{otherwise}")
    return Path(data)


def child_environment(
    extra: Mapping[str, str] | None = None, environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The caller's environment for a child process, without its OpenTelemetry and
    otel-safety settings (OTEL_SAFETY_* would change what serve or configure() does, where it
    listens; OTEL_EXPORTER_* would add an exporter), so a figure measures what the bench
    says; OTEL_SAFETY_PATTERN_CACHE is kept, and `extra` is what the bench sets on purpose."""
    source = os.environ if environ is None else environ
    kept = {k: v for k, v in source.items() if not k.startswith("OTEL_") or k in _KEPT}
    return {**kept, **(extra or {})}


def forget_caller_otel_settings() -> None:
    """Drop the caller's OpenTelemetry and otel-safety settings from this process too: the
    OTLP exporters a bench's own clients build read OTEL_EXPORTER_OTLP_* (headers,
    compression, timeouts) when not given them, which would change what the figure times."""
    for name in [k for k in os.environ if k.startswith("OTEL_") and k not in _KEPT]:
        del os.environ[name]


def failure(what: str, done: subprocess.CompletedProcess[str]) -> str:
    """What a failed child said, for the bench's own exit message: its exit code, then its
    stderr and its stdout (a command may explain itself on either)."""
    said = [f"{what} failed (exit {done.returncode})"]
    for name, text in (("stderr", done.stderr), ("stdout", done.stdout)):
        if text and text.strip():
            said.append(f"--- its {name} ---\n{text.rstrip()}")
    return "\n".join(said)
