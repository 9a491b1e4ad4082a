"""What `serve` left on disk beside a store: acknowledged requests not yet written, batches
not yet forwarded.

After a crash (`SIGKILL`, a lost machine) the store alone reads as if nothing came in, while
the spools hold what clients were told was received. `status` names them and says what
finishes them, without taking them from a `serve` that is running.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from otel_safety.spool import SEGMENT_SUFFIX, Spool, SpoolBusy

__all__ = ["Backlog", "backlog"]

_KINDS = {"spool": "acknowledged requests not yet written", "forward": "batches not yet forwarded"}
_FOLDERS_PER_KIND = 16  # as `serve` picks them: `<db>.spool`, `<db>.spool-2`, ...


@dataclass(frozen=True)
class Backlog:
    folder: str
    kind: str  # "spool" or "forward"
    records: int | None  # None: a running serve holds the folder (and is on it)

    def line(self, db: str) -> str:
        if self.records is None:
            return f"{self.folder}: held by a running serve, which works through it"
        return (
            f"{self.folder}: {self.records} {_KINDS[self.kind]}; "
            f"`otel-safety serve --db {db}` finishes them"
        )


def backlog(db: str) -> list[Backlog]:
    """Every spool folder beside `db` that holds records (or that a serve holds)."""
    found = []
    for kind in _KINDS:
        base = f"{db}.{kind}"
        for number in range(1, _FOLDERS_PER_KIND + 1):
            folder = Path(base if number == 1 else f"{base}-{number}")
            if not folder.is_dir() or not any(folder.glob(f"*{SEGMENT_SUFFIX}")):
                continue
            try:
                spool = Spool(folder, sync=False)
            except SpoolBusy:
                found.append(Backlog(str(folder), kind, None))
                continue
            try:
                records = sum(1 for _ in spool.leftovers())
            finally:
                spool.close(remove_if_empty=False)
            if records:
                found.append(Backlog(str(folder), kind, records))
    return found
