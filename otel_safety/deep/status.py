"""What `otel-safety status` says of the deep tier: on or off, how it picks, what it did.

The counts come from the store: `deep_runs` (every analysis, errors included) and the
tier's counters (drops and skips too) that the last process writing the store left in
`otel_safety_meta`. A running `serve` shows the same counters live at /metrics.
"""

from __future__ import annotations

import json
from typing import Any

import duckdb

from otel_safety.config import Settings
from otel_safety.deep.settings import describe

RUNS_SQL = """
SELECT count(*) FILTER (outcome = 'ok') AS analysed,
       count(*) FILTER (outcome = 'error') AS failed,
       count(*) FILTER (level_after <> level_before) AS raised,
       coalesce(sum(prompt_tokens + completion_tokens), 0) AS tokens
FROM deep_runs
"""
SHOWN = (
    "deep_candidates",
    "deep_queued",
    "deep_dropped",
    "deep_sampled_out",
    "deep_over_budget",
    "deep_over_token_budget",
    "deep_errors",
    "deep_unfinished_at_shutdown",
)


def deep_status(settings: Settings, con: duckdb.DuckDBPyConnection) -> dict[str, Any]:
    """The tier's state as JSON-able data."""
    runs: dict[str, Any] = {}
    counters = None
    listed = con.execute("SELECT table_name FROM information_schema.tables").fetchall()
    tables = {row[0] for row in listed}
    if "deep_runs" in tables:
        cursor = con.execute(RUNS_SQL)
        runs = dict(zip([d[0] for d in cursor.description], cursor.fetchone(), strict=True))
        row = con.execute(
            "SELECT value FROM otel_safety_meta WHERE key = 'deep_counters'"
        ).fetchone()
        counters = json.loads(row[0]) if row else None
    return {
        "state": describe(settings),
        "on": settings.deep,
        "chooses": {
            "levels": settings.deep_levels,
            "detectors": settings.deep_detectors,
            "uncertainty": settings.deep_uncertainty,
            "sample_rate": settings.deep_sample_rate,
            "per_minute": settings.deep_per_minute,
            "tokens_per_minute": settings.deep_tokens_per_minute,
        },
        "stored": runs,
        "last_counters": counters,
    }


def status_lines(status: dict[str, Any], settings: Settings) -> list[str]:
    """The same, as lines for the terminal."""
    lines = [f"deep analysis: {status['state']}"]
    if settings.deep:
        lines.append(
            f"  chooses: levels {', '.join(settings.deep_levels) or 'none'}; detectors "
            f"{', '.join(settings.deep_detectors) or 'none'}; findings within "
            f"{settings.deep_uncertainty:g} of their threshold; {settings.deep_sample_rate:.0%} "
            f"sampled; at most {_limit(settings.deep_per_minute)} traces and "
            f"{_limit(settings.deep_tokens_per_minute)} tokens a minute; queue "
            f"{settings.deep_queue_size}"
        )
    runs = status["stored"]
    if runs and (runs["analysed"] or runs["failed"]):
        lines.append(
            f"  in the store: {runs['analysed']} analyses, {runs['failed']} failed, "
            f"{runs['raised']} raised a level, {runs['tokens']} tokens"
        )
    last = status["last_counters"]
    if last:
        shown = ", ".join(
            f"{name.removeprefix('deep_')} {last[name]}" for name in SHOWN if name in last
        )
        lines.append(f"  last writer's counters: {shown}")
    return lines


def _limit(value: int) -> str:
    return "unlimited" if value == 0 else str(value)
