"""`python -m otel_safety.cli`: the `otel-safety` command, built in `otel_safety.commands`."""

from __future__ import annotations

import sys

from otel_safety.commands.main import build_parser, main

__all__ = ["build_parser", "main"]

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
