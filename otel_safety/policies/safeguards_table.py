"""The safeguards table as data (`safeguards.toml`): rows of signal cut-offs, first match wins.

The rows live in data so a deployment can read and extend the table it runs under without
forking the policy; the adaptive policy scales every cut-off at once.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from otel_safety.analysis.patterns.datafiles import current_data_dir, load_compiled
from otel_safety.model import EscalationLevel
from otel_safety.policies.signals import NUMERIC, Signals

__all__ = ["Row", "SafeguardsTable", "current_table", "load_table"]

Cutoffs = tuple[tuple[str, float], ...]


@dataclass(frozen=True)
class Row:
    """One row: the level, and the cut-offs that must all (or any) be reached."""

    level: EscalationLevel
    all: Cutoffs = ()
    any: Cutoffs = ()
    violation: bool = False

    def matches(self, signals: Signals) -> bool:
        if self.violation and signals.violation:
            return True
        if self.all and all(getattr(signals, name) >= cut for name, cut in self.all):
            return True
        return any(getattr(signals, name) >= cut for name, cut in self.any)

    def scaled(self, factor: float) -> Row:
        """Every cut-off times `factor`, capped at 1 (a cut-off of 1 still fires at 1)."""
        return replace(self, all=_scaled(self.all, factor), any=_scaled(self.any, factor))

    def describe(self) -> str:
        parts = [" and ".join(f"{name} >= {cut:g}" for name, cut in self.all)]
        parts.append(" or ".join(f"{name} >= {cut:g}" for name, cut in self.any))
        parts.append("any violation" if self.violation else "")
        return " or ".join(part for part in parts if part)


@dataclass(frozen=True)
class SafeguardsTable:
    rows: tuple[Row, ...]

    def level(self, signals: Signals) -> EscalationLevel:
        """The first matching row's level, NONE when none does."""
        if not signals.present:  # most findings: cut-offs are above 0, so no row can match
            return EscalationLevel.NONE
        return next((row.level for row in self.rows if row.matches(signals)), EscalationLevel.NONE)

    @functools.lru_cache(maxsize=64)  # noqa: B019 - tables are few and live as long as policies
    def scaled(self, factor: float) -> SafeguardsTable:
        return SafeguardsTable(tuple(row.scaled(factor) for row in self.rows))

    def describe(self) -> list[tuple[str, str]]:
        """(condition, level) per row, as the docs show the table."""
        return [(row.describe(), row.level.name) for row in self.rows]


@functools.cache  # per data folder, as every detector's data
def load_table(data_dir: str | None = None) -> SafeguardsTable:
    return load_compiled("safeguards", _compile, "safeguards table", data_dir=data_dir)


def current_table() -> SafeguardsTable:
    """The table in force: packaged, plus `safeguards.toml` in OTEL_SAFETY_DATA_DIR."""
    return load_table(current_data_dir())


def _scaled(cutoffs: Cutoffs, factor: float) -> Cutoffs:
    return tuple((name, min(1.0, cut * factor)) for name, cut in cutoffs)


def _compile(data: Mapping[str, Any]) -> SafeguardsTable:
    rows = data.get("rows", [])
    if not isinstance(rows, list) or not rows:
        raise ValueError("[[rows]] must list the table's rows")
    return SafeguardsTable(tuple(_row(row, f"row {n}") for n, row in enumerate(rows, 1)))


def _row(row: Any, where: str) -> Row:
    if not isinstance(row, Mapping):
        raise ValueError(f"{where}: a row is a table (level, all, any, violation)")
    unknown = sorted(set(row) - {"level", "all", "any", "violation"})
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {', '.join(unknown)}")
    if "level" not in row:
        raise ValueError(f'{where}: say which level it gives (level = "WARN")')
    level = EscalationLevel.parse(row["level"])
    violation = row.get("violation", False)
    if not isinstance(violation, bool):
        raise ValueError(f"{where}: violation must be true or false")
    made = Row(
        level,
        _cutoffs(row.get("all", {}), f"{where}.all"),
        _cutoffs(row.get("any", {}), f"{where}.any"),
        violation,
    )
    if not (made.all or made.any or made.violation):
        raise ValueError(f"{where}: give it a condition (all, any or violation = true)")
    return made


def _cutoffs(table: Any, where: str) -> Cutoffs:
    if not isinstance(table, Mapping):
        raise ValueError(f"{where} must be a table of signal = cut-off")
    for name, cut in table.items():
        if name not in NUMERIC:
            raise ValueError(
                f"{where}: unknown signal {name!r}; the signals are {', '.join(NUMERIC)}"
            )
        if isinstance(cut, bool) or not isinstance(cut, int | float) or not 0 < cut <= 1:
            raise ValueError(f"{where}.{name}: a cut-off is a number in (0, 1], got {cut!r}")
    return tuple((str(name), float(cut)) for name, cut in table.items())
