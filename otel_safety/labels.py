"""Labels for calibration: import them from CSV/JSONL, add one by hand, read the ones in force.

A label says whether one detector *should* have fired on one trace. The store keeps every
label ever written (the `labels` table is a history); the label in force for a
(trace, detector) pair is the latest one, so a reviewer's correction overrides a dataset's
label without deleting it. A label whose `source` starts with `synthetic` is synthetic
(rows we wrote ourselves, as `otel-safety eval` marks them); every other source, a dataset's
(`external:<dataset>`) or a person's (`human` by default), is real.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb

from otel_safety import detectors as detector_registry
from otel_safety.exporters.duckdb import clean, ensure_schema, insert_rows, open_store, rollback
from otel_safety.exporters.schema import LABELS
from otel_safety.result_tables import csv_unescaped, for_spreadsheets
from otel_safety.sql_helpers import EFFECTIVE_LABELS_SQL

FIELDS = ("trace_id", "span_id", "detector", "label", "source", "note")
FUTURE_SLACK = timedelta(minutes=5)  # clocks of other machines run a little ahead
OPTIONAL_FIELDS = ("created_at",)  # as `labels export` writes it: keeps the history's order
DEFAULT_SOURCE = "human"
SYNTHETIC_PREFIX = "synthetic"
TRUE_WORDS = frozenset({"true", "t", "yes", "y", "1", "positive", "pos"})
FALSE_WORDS = frozenset({"false", "f", "no", "n", "0", "negative", "neg"})
TRACE_ID = re.compile(r"^[0-9a-f]{32}$")
SPAN_ID = re.compile(r"^[0-9a-f]{16}$")
DETECTOR_KEY = re.compile(r"^[a-z][a-z0-9_]*$")
MAX_SOURCE = 200
MAX_NOTE = 4000
ALLOW_UNKNOWN_TRACES = "--allow-unknown-traces"  # the flag of `label` and `labels import`


class LabelError(ValueError):
    """Labels could not be read or written; the message says which and why."""


def is_synthetic(source: str | None) -> bool:
    """Synthetic rows show that rules do what we meant, not that they work: kept apart."""
    return (source or "").strip().lower().startswith(SYNTHETIC_PREFIX)


def parse_label(value: Any) -> bool:
    """true/false, yes/no, 1/0, positive/negative (any case), or a JSON boolean."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    text = str(value).strip().lower() if value is not None else ""
    if text in TRUE_WORDS:
        return True
    if text in FALSE_WORDS:
        return False
    raise LabelError(
        f"label must be true or false (or yes/no, 1/0, positive/negative), got {value!r}"
    )


@dataclass(frozen=True)
class Label:
    trace_id: str
    detector: str
    label: bool
    source: str = DEFAULT_SOURCE
    span_id: str | None = None
    note: str | None = None
    created_at: datetime | None = None  # None: now

    def row(self) -> dict[str, Any]:
        return asdict(self)

    def key(self) -> tuple[Any, ...]:
        """What makes two labels the same label (when it was written does not)."""
        return tuple(self.row()[name] for name in FIELDS)


@dataclass
class ImportResult:
    """What an import did: every line is accounted for."""

    read: int = 0
    added: int = 0
    duplicates: int = 0  # the store had them
    repeated: int = 0  # lines the file gave more than once
    bad: list[tuple[int, str]] = field(default_factory=list)

    def describe(self, path: str, db: str) -> str:
        lines = [
            f"{path}: {self.read} label line(s) read: {self.added} added to {db}, "
            f"{self.duplicates} already there"
            + (f", {self.repeated} repeated in the file" if self.repeated else "")
            + (f", {len(self.bad)} bad" if self.bad else "")
        ]
        if self.bad:
            lines.append(f"{len(self.bad)} bad line(s) not imported (fix them and import again):")
            lines.extend(f"  line {number}: {problem}" for number, problem in self.bad[:50])
            if len(self.bad) > 50:
                lines.append(f"  … and {len(self.bad) - 50} more")
        return "\n".join(lines)


def connect(path: str | Path, *, read_only: bool = False, wait: float | None = None):
    """Open an existing store for labels (a lock held by a writing app is waited out)."""
    return open_store(path, read_only=read_only, wait=wait)


class Checker:
    """Validates raw label records against one store: ids, detector keys, known traces."""

    def __init__(
        self,
        con: duckdb.DuckDBPyConnection,
        default_source: str = DEFAULT_SOURCE,
        allow_unknown_traces: bool = False,
    ) -> None:
        self.con = con
        self.default_source = default_source
        self.allow_unknown_traces = allow_unknown_traces
        stored = {
            row[0] for row in con.execute("SELECT DISTINCT detector FROM findings").fetchall()
        }
        self.detectors = sorted(set(detector_registry.available()) | stored)

    def check(self, raw: dict[str, Any]) -> Label:
        unknown = sorted(set(raw) - set(FIELDS) - set(OPTIONAL_FIELDS))
        if unknown:
            raise LabelError(
                f"unknown field(s) {', '.join(unknown)}; fields: "
                f"{', '.join((*FIELDS, *OPTIONAL_FIELDS))}"
            )
        span_id = _hex_id(raw.get("span_id"), SPAN_ID, "span_id", 16)
        trace_id = _hex_id(raw.get("trace_id"), TRACE_ID, "trace_id", 32)
        if trace_id is None and span_id is None:
            raise LabelError("a label needs a trace_id or a span_id")
        trace_id = self._trace_of(trace_id, span_id)
        detector = str(raw.get("detector") or "").strip()
        if not detector:
            raise LabelError("detector is missing")
        if detector not in self.detectors:
            raise LabelError(f"unknown detector {detector!r}; known: {', '.join(self.detectors)}")
        if "label" not in raw or raw["label"] in (None, ""):
            raise LabelError("label is missing (true or false)")
        source = _text(raw.get("source"), MAX_SOURCE, "source") or self.default_source
        return Label(
            trace_id=trace_id,
            detector=detector,
            label=parse_label(raw["label"]),
            source=source,
            span_id=span_id,
            note=_text(raw.get("note"), MAX_NOTE, "note"),
            created_at=_timestamp(raw.get("created_at")),
        )

    def _trace_of(self, trace_id: str | None, span_id: str | None) -> str:
        if span_id is not None:
            traces = [
                row[0]
                for row in self.con.execute(
                    "SELECT DISTINCT trace_id FROM spans WHERE span_id = ? "
                    "UNION SELECT DISTINCT trace_id FROM findings WHERE span_id = ?",
                    [span_id, span_id],
                ).fetchall()
            ]
            if trace_id is None:
                if len(traces) == 1:
                    return traces[0]
                if not traces:
                    raise LabelError(f"span {span_id} is not in the store; give its trace_id")
                raise LabelError(f"span {span_id} is in {len(traces)} traces; give the trace_id")
            if traces and trace_id not in traces:
                raise LabelError(f"span {span_id} is not in trace {trace_id}")
            if not traces and not self.allow_unknown_traces and self._has_spans(trace_id):
                raise LabelError(
                    f"span {span_id} is not in trace {trace_id} (a typo? its spans: "
                    f'otel-safety query "SELECT span_id, name FROM spans WHERE trace_id = '
                    f"'{trace_id}'\")"
                )
        if not self.allow_unknown_traces and not self._known(trace_id):
            if self._has_spans(trace_id):
                raise LabelError(
                    f"trace {trace_id} is in the store but was not judged (none of its spans "
                    "is a GenAI model, tool or agent span), so no detector's figures could use "
                    "a label on it"
                )
            raise LabelError(
                f"trace {trace_id} is not in the store (a typo? {ALLOW_UNKNOWN_TRACES} "
                "keeps such labels for traces not ingested yet)"
            )
        return trace_id

    def _has_spans(self, trace_id: str) -> bool:
        found = self.con.execute(
            "SELECT 1 FROM spans WHERE trace_id = ? LIMIT 1", [trace_id]
        ).fetchone()
        return found is not None

    def _known(self, trace_id: str) -> bool:
        found = self.con.execute(
            "SELECT 1 FROM traces WHERE trace_id = ? UNION ALL "
            "SELECT 1 FROM findings WHERE trace_id = ? LIMIT 1",
            [trace_id, trace_id],
        ).fetchone()
        return found is not None


def read_records(path: Path) -> Iterator[tuple[int, dict[str, Any] | LabelError]]:
    """(line number, record or the problem with that line) for a .csv or .jsonl file."""
    suffix = path.suffix.lower()
    if suffix == ".csv":
        yield from _csv_records(path)
    elif suffix in (".jsonl", ".ndjson", ".json"):
        yield from _jsonl_records(path)
    else:
        raise LabelError(f"{path}: expected a .csv or .jsonl file")


def import_labels(
    db: str | Path,
    path: str | Path,
    *,
    source: str = DEFAULT_SOURCE,
    allow_unknown_traces: bool = False,
) -> ImportResult:
    """Add a file's good labels to the store (one statement) and name every bad line.

    A label already in the store (same trace, span, detector, value, source and note) is
    not added again, so importing a file twice, or again after fixing its bad lines, adds
    each label once.
    """
    path = Path(path)
    if not path.is_file():
        raise LabelError(f"no such label file: {path}")
    result = ImportResult()
    with connect(db) as con:
        ensure_schema(con, str(db))
        checker = Checker(con, source, allow_unknown_traces)
        good: list[tuple[int, Label]] = []
        refused: set[int] = set()  # lines contradicted by a later line
        taken: dict[tuple[str, str], list[tuple[int, Label]]] = {}  # the lines kept so far
        for number, record in read_records(path):
            result.read += 1  # every line accounted for: added, already there, repeated or bad
            if isinstance(record, LabelError):
                result.bad.append((number, str(record)))
                continue
            try:
                label = checker.check(record)
            except LabelError as exc:
                result.bad.append((number, str(exc)))
                continue
            kept = taken.setdefault((label.trace_id, label.detector), [])
            if any(seen == label for _, seen in kept):
                result.repeated += 1  # the same line again: one label
                continue
            against = [at for at, seen in kept if _contradicts(seen, label)]
            if against:  # neither says which holds: both are refused
                result.bad.append(
                    (number, f"contradicts line {against[0]} for the same trace and detector")
                )
                refused.update(against)
                continue
            kept.append((number, label))
            good.append((number, label))
        for number in sorted(refused):
            result.bad.append((number, "contradicted by a later line (neither is imported)"))
        result.bad.sort(key=lambda bad: bad[0])
        good_labels = [label for number, label in good if number not in refused]
        fresh = _not_stored(con, good_labels)
        result.duplicates = len(good_labels) - len(fresh)
        if fresh:
            _insert(con, fresh)
        result.added = len(fresh)
    return result


def _contradicts(earlier: Label, later: Label) -> bool:
    """Two values for one trace and detector, with nothing to say which holds. Lines that
    carry different times are a history (what `labels export` writes): the newest is in
    force, as for labels added one by one."""
    if earlier.label == later.label:
        return False
    timed = earlier.created_at is not None and later.created_at is not None
    return not timed or earlier.created_at == later.created_at


def add_label(
    db: str | Path,
    trace_id: str,
    detector: str,
    value: str | bool,
    *,
    note: str | None = None,
    source: str = DEFAULT_SOURCE,
    span_id: str | None = None,
    allow_unknown_traces: bool = False,
) -> Label:
    """Label one trace by hand; the newest label for a (trace, detector) is the one in force."""
    raw = {"trace_id": trace_id, "detector": detector, "label": value, "source": source}
    if note:
        raw["note"] = note
    if span_id:
        raw["span_id"] = span_id
    with connect(db) as con:
        ensure_schema(con, str(db))
        label = Checker(con, source, allow_unknown_traces).check(raw)
        _insert(con, [label])
    return label


def export_labels(con: duckdb.DuckDBPyConnection, effective: bool = False) -> list[dict[str, Any]]:
    """Every label (or only those in force), oldest first, as plain records."""
    sql = EFFECTIVE_LABELS_SQL if effective else "SELECT * FROM labels"
    rows = con.execute(
        f"SELECT trace_id, span_id, detector, label, source, note, created_at FROM ({sql}) "
        "ORDER BY created_at, trace_id, detector"
    ).fetchall()
    names = (*FIELDS, "created_at")
    return [
        {**dict(zip(names, row, strict=True)), "created_at": row[-1].isoformat()} for row in rows
    ]


def write_records(records: Sequence[dict[str, Any]], fmt: str, out: Any) -> None:
    if fmt == "jsonl":
        for record in records:
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
        return
    # "\r\n" (RFC 4180), so that a note holding a bare "\r" is quoted, as "\n" alone
    # leaves it: the import would cut the line there.
    writer = csv.DictWriter(out, fieldnames=[*FIELDS, "created_at"], lineterminator="\r\n")
    writer.writeheader()
    for record in records:
        writer.writerow({k: _csv_value(v) for k, v in record.items()})


def _csv_value(value: Any) -> Any:
    """true/false as the docs and the import's examples write them; text kept from
    spreadsheets' formulas (the import takes the guard off again)."""
    if isinstance(value, bool):
        return str(value).lower()
    return for_spreadsheets(value) if isinstance(value, str) else value


# The labels table with every column written (a label's own time included), staged as the
# store stages rows: binding lists value by value cost a millisecond a label.
_LABELS_AS_GIVEN = replace(LABELS, defaults={})


def _insert(con: duckdb.DuckDBPyConnection, rows: Sequence[Label]) -> None:
    """One INSERT; a label without a time gets the store's current time."""
    con.execute("BEGIN TRANSACTION")
    try:
        insert_rows(con, _LABELS_AS_GIVEN, [row.row() for row in rows])
        con.execute("UPDATE labels SET created_at = current_timestamp WHERE created_at IS NULL")
        con.execute("COMMIT")
    except Exception:
        rollback(con)
        raise


def _timestamp(value: Any) -> datetime | None:
    if value is None or str(value).strip() == "":
        return None
    try:
        moment = datetime.fromisoformat(str(value).strip())
    except ValueError:
        raise LabelError(f"created_at must be an ISO timestamp, got {value!r}") from None
    if moment.tzinfo is not None:  # the store keeps UTC without a zone
        moment = moment.astimezone(UTC).replace(tzinfo=None)
    if moment > datetime.now(UTC).replace(tzinfo=None) + FUTURE_SLACK:
        raise LabelError(
            f"created_at {value} is in the future: it would stay in force over every label "
            "given before then, a reviewer's correction too; leave it out or give the time "
            "it was made"
        )
    return moment


def _not_stored(con: duckdb.DuckDBPyConnection, labels: Iterable[Label]) -> list[Label]:
    """The labels that would change the store. One with a time (as `labels export` writes
    them) is there only with that time: a history true, false, true must arrive whole, or
    the label in force would change. One without a time is there when it is the label in
    force for its trace and detector: importing a file again re-asserts what a later
    correction changed, and adds nothing otherwise."""
    timed: set[tuple[Any, ...]] = set()
    in_force: dict[tuple[str, str], tuple[Any, ...]] = {}
    rows = con.execute(
        f"SELECT {', '.join(FIELDS)}, created_at FROM labels "
        "ORDER BY created_at, label"  # as `effective_labels` ranks them: the last is in force
    ).fetchall()
    for *fields, created_at in rows:
        stored = Label(**dict(zip(FIELDS, fields, strict=True)))
        timed.add((*stored.key(), created_at))
        in_force[(stored.trace_id, stored.detector)] = stored.key()
    fresh: list[Label] = []
    for label in labels:
        if label.created_at is not None:
            if (*label.key(), label.created_at) in timed:
                continue
            timed.add((*label.key(), label.created_at))
        elif in_force.get((label.trace_id, label.detector)) == label.key():
            continue
        else:
            in_force[(label.trace_id, label.detector)] = label.key()
        fresh.append(label)
    return fresh


def _csv_records(path: Path) -> Iterator[tuple[int, dict[str, Any] | LabelError]]:
    # Bytes that are not UTF-8 are kept as escapes, so one bad cell costs its record, not
    # the file, and the line numbers stay right.
    text = path.read_bytes().decode("utf-8-sig", errors="surrogateescape")
    reader = csv.reader(io.StringIO(text, newline=""))
    ended = 0  # a quoted cell may span lines: name the line a record starts on
    try:
        header = [name.strip() for name in next(reader, [])]
        if not any(header):
            raise LabelError(f"{path}: empty file; the first line names the columns")
        missing = {"detector", "label"} - set(header)
        if missing or not {"trace_id", "span_id"} & set(header):
            raise LabelError(
                f"{path} line 1: the header needs detector, label and trace_id or "
                f"span_id; got {', '.join(header)}"
            )
        unknown = [name for name in header if name not in (*FIELDS, *OPTIONAL_FIELDS)]
        if unknown:  # refused once, not on the rows that happen to fill it in
            raise LabelError(
                f"{path} line 1: unknown column(s) {', '.join(unknown)}; columns: "
                f"{', '.join((*FIELDS, *OPTIONAL_FIELDS))}"
            )
        ended = reader.line_num
        for cells in reader:
            line, ended = ended + 1, reader.line_num
            if not any(cell.strip() for cell in cells):
                continue
            if len(cells) > len(header):
                yield line, LabelError(f"{len(cells)} cells for {len(header)} columns")
                continue
            if not all(cell.isascii() or _utf8(cell) for cell in cells):
                yield line, LabelError("not UTF-8 (save the file as UTF-8)")
                continue
            yield (
                line,
                {
                    k: csv_unescaped(v)  # as `labels export` kept it from spreadsheets
                    for k, v in zip(header, cells, strict=False)
                    if v.strip() != ""
                },
            )
    except csv.Error as exc:
        raise LabelError(f"{path} line {ended + 1}: unreadable CSV: {exc}") from exc


def _utf8(cell: str) -> bool:
    """Whether a cell read with surrogate escapes was UTF-8 all along."""
    try:
        cell.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _jsonl_records(path: Path) -> Iterator[tuple[int, dict[str, Any] | LabelError]]:
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            try:
                text = raw.decode("utf-8-sig" if number == 1 else "utf-8").strip()
            except UnicodeDecodeError as exc:
                yield number, LabelError(f"not UTF-8: {exc}")
                continue
            if not text:
                continue
            try:
                record = json.loads(text)
            except json.JSONDecodeError as exc:
                yield number, LabelError(f"not JSON: {exc.msg} at column {exc.colno}")
                continue
            if not isinstance(record, dict):
                yield number, LabelError("expected a JSON object per line")
                continue
            yield number, {k: v for k, v in record.items() if v is not None}


def _hex_id(value: Any, pattern: re.Pattern[str], name: str, digits: int) -> str | None:
    if value is None or str(value).strip() == "":
        return None
    text = str(value).strip().lower().removeprefix("0x")
    if not pattern.match(text):
        raise LabelError(f"{name} must be {digits} hex digits, got {value!r}")
    return text


def _text(value: Any, limit: int, name: str) -> str | None:
    if value is None:
        return None
    if isinstance(value, Mapping | list | tuple):  # stored as Python's repr of it otherwise
        raise LabelError(f"{name} must be text, got a {type(value).__name__}: {value!r:.60}")
    text = clean(str(value).strip()) or None
    if text is not None and len(text) > limit:
        raise LabelError(f"{name} longer than {limit} characters")
    return text
