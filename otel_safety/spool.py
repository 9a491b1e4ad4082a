"""A write-ahead spool: what a receiver acknowledged is on disk until the store has it.

A receiver appends each admitted request to the spool, and only then answers the client;
the record is released when every trace it carried has been written to the store. Records
still in the spool when the process stops (killed, a drain that ran out of time) are read
back at the next start and judged then, so an acknowledged span is a written span.

On disk: numbered segment files in one folder, each a run of records (4-byte length,
4-byte CRC-32, payload). A segment is deleted once it is closed and all its records are
released. A record cut short by a crash fails its length or CRC and is ignored, with
everything after it in that segment: it was never acknowledged, since acknowledging waits
for the append to reach the disk. The spool is bounded in bytes; when full, appends fail
and the receiver refuses the request with a retryable status.

Each release is also written down, beside its segment (`<segment>.released`, the released
records' numbers): a segment stays open until it fills, and a crash must not send back what
was stored long before it. These notes are written, not fsynced: a killed process loses
none of them; a machine that loses power may judge a few requests twice, never lose one.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import struct
import threading
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

logger = logging.getLogger(__name__)

__all__ = ["Record", "Spool", "SpoolBusy", "SpoolFull"]

_HEADER = struct.Struct("<II")  # payload length, CRC-32 of the payload
_RELEASED = struct.Struct("<I")  # a released record's number in its segment
SEGMENT_SUFFIX = ".spool"
RELEASED_SUFFIX = ".released"


class SpoolBusy(Exception):
    """Another process holds this spool folder."""


class SpoolFull(Exception):
    """The spool holds its maximum bytes: refuse the request, the client will retry."""


@dataclass(frozen=True, order=True)
class Record:
    """Where one appended request sits: its segment's number and its place in it."""

    segment: int
    index: int


@dataclass
class _Segment:
    path: Path
    size: int = 0
    records: int = 0
    released: int = 0
    closed: bool = False

    @property
    def finished(self) -> bool:
        return self.closed and self.released >= self.records

    @property
    def notes(self) -> Path:
        """Where the segment's releases are written down."""
        return self.path.with_suffix(RELEASED_SUFFIX)


class Spool:
    """Append, fsync, release; `leftovers()` reads back what an earlier run did not release."""

    def __init__(
        self,
        folder: str | Path,
        *,
        max_bytes: int = 1 << 30,
        segment_bytes: int = 16 << 20,
        sync: bool = True,
    ) -> None:
        self.folder = Path(folder)
        # The requests held here are as clients sent them, before any masking: for the
        # process's user alone.
        self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._lock_file = open(self.folder / "lock", "a+b")  # noqa: SIM115 - held while open
        try:
            fcntl.flock(self._lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            self._lock_file.close()
            raise SpoolBusy(f"another process holds the spool {self.folder}") from exc
        self.max_bytes = max_bytes
        # A segment goes only when closed and wholly released: several must fit the budget,
        # or the open one's released records would count against it for good.
        self.segment_bytes = max(1, min(segment_bytes, max_bytes // 4))
        self.sync = sync
        self._lock = threading.Lock()
        self._segments: dict[int, _Segment] = {}
        for path in sorted(self.folder.glob(f"*{SEGMENT_SUFFIX}")):
            number = _segment_number(path)
            if number is not None:  # left by an earlier run: read back, never appended to
                self._segments[number] = _Segment(path, path.stat().st_size, closed=True)
        for notes in self.folder.glob(f"*{RELEASED_SUFFIX}"):
            if not notes.with_suffix(SEGMENT_SUFFIX).exists():  # its segment went, then a crash
                notes.unlink(missing_ok=True)  # before a new segment of that number has them
        self._next = max(self._segments, default=0) + 1
        self._handle: BinaryIO | None = None
        self._current: int | None = None
        self._where: dict[Record, tuple[int, int]] = {}  # record -> (payload offset, length)

    # -- counts (metrics) ---------------------------------------------------------------------
    @property
    def bytes(self) -> int:
        with self._lock:
            return sum(segment.size for segment in self._segments.values())

    @property
    def records(self) -> int:
        """Records appended or read back and not yet released."""
        with self._lock:
            return sum(s.records - s.released for s in self._segments.values())

    # -- writing ------------------------------------------------------------------------------
    def append(self, payload: bytes) -> Record:
        """Put `payload` on disk (fsynced) and return its record; SpoolFull when over the
        byte budget."""
        size = _HEADER.size + len(payload)
        with self._lock:
            used = sum(segment.size for segment in self._segments.values())
            current = self._segments.get(self._current) if self._current is not None else None
            if used + size > self.max_bytes and current and current.released >= current.records:
                self._close_current()  # all of it stored: its bytes are free once it goes
                used = sum(segment.size for segment in self._segments.values())
            if used + size > self.max_bytes:
                raise SpoolFull(
                    f"the spool in {self.folder} holds {used} of {self.max_bytes} bytes"
                )
            number, segment, handle = self._writable(size)
            try:
                handle.write(_HEADER.pack(len(payload), zlib.crc32(payload)) + payload)
                handle.flush()
                if self.sync:
                    os.fdatasync(handle.fileno())
            except OSError:
                self._abandon_current(segment)
                raise
            record = Record(number, segment.records)
            self._where[record] = (segment.size + _HEADER.size, len(payload))
            segment.records += 1
            segment.size += size
            return record

    def read(self, record: Record) -> bytes:
        """The payload of a record appended or read back by this spool and not released."""
        with self._lock:
            offset, length = self._where[record]
            path = self._segments[record.segment].path
        with open(path, "rb") as handle:
            handle.seek(offset)
            return handle.read(length)

    def release(self, record: Record) -> None:
        """The record's work is done (its traces stored, its spans sent): it need not be
        read back any more."""
        with self._lock:
            self._where.pop(record, None)
            segment = self._segments.get(record.segment)
            if segment is None:
                return
            segment.released += 1
            if segment.finished:
                self._delete(record.segment)
            else:
                _note_release(segment.notes, record.index)

    def close(self, *, remove_if_empty: bool = False) -> None:
        """Close the open segment and let the folder go; what is not released stays for
        the next start. `remove_if_empty`: a folder left holding nothing is removed, while
        its lock is still held, so no other process can have taken it meanwhile."""
        with self._lock:
            self._close_current()
            if remove_if_empty and not self._segments and not self._lock_file.closed:
                self._remove_folder()
            if not self._lock_file.closed:
                self._lock_file.close()  # closing drops the lock

    def _remove_folder(self) -> None:
        try:
            if any(entry.name != "lock" for entry in self.folder.iterdir()):
                return  # something this spool does not own
            (self.folder / "lock").unlink()
            self.folder.rmdir()
        except OSError as exc:  # another process's lock file arrived: leave it the folder
            logger.info("otel-safety spool: %s stays: %s", self.folder, exc)

    def adopt(self, other: Spool) -> int:
        """Take over the segments another spool's folder holds (a crashed serve's, found
        free): they are read back with this spool's own leftovers. The count moved."""
        moved = 0
        with self._lock, other._lock:
            for number in sorted(other._segments):
                segment = other._segments.pop(number)
                target = self.folder / f"{self._next:012d}{SEGMENT_SUFFIX}"
                if segment.notes.exists():  # first: a segment never moves without its notes
                    segment.notes.replace(target.with_suffix(RELEASED_SUFFIX))
                segment.path.replace(target)  # folders beside one another: one filesystem
                self._segments[self._next] = _Segment(target, target.stat().st_size, closed=True)
                self._next += 1
                moved += 1
        return moved

    # -- reading back -------------------------------------------------------------------------
    def leftovers(self) -> Iterator[tuple[Record, bytes]]:
        """Every record an earlier run appended and did not release, oldest first. Each must
        be released in turn (a segment goes when all its records have)."""
        with self._lock:
            old = sorted(n for n, s in self._segments.items() if s.closed and s.records == 0)
        for number in old:
            segment = self._segments[number]
            found = list(_read(segment.path))
            done = _released(segment.notes, len(found))
            owed = [(index, place) for index, place in enumerate(found) if index not in done]
            with self._lock:
                segment.records, segment.released = len(found), len(found) - len(owed)
                if not owed:
                    self._delete(number)
                    continue
                for index, (offset, payload) in owed:
                    self._where[Record(number, index)] = (offset, len(payload))
            for index, (_, payload) in owed:
                yield Record(number, index), payload

    # -- internals ----------------------------------------------------------------------------
    def _writable(self, size: int) -> tuple[int, _Segment, BinaryIO]:
        """The open segment, or a new one when it would grow past `segment_bytes`."""
        number = self._current
        current = self._segments.get(number) if number is not None else None
        if (
            number is not None
            and current is not None
            and self._handle is not None
            and current.size + size <= self.segment_bytes
        ):
            return number, current, self._handle
        self._close_current()
        number = self._next
        self._next += 1
        path = self.folder / f"{number:012d}{SEGMENT_SUFFIX}"
        handle = os.fdopen(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600), "ab")
        self._handle = handle
        self._current = number
        segment = self._segments[number] = _Segment(path)
        return number, segment, handle

    def _abandon_current(self, segment: _Segment) -> None:
        """A write that failed part-way (a full disk) left bytes no record owns: cut them
        off, and append from now on to a new segment, so that no acknowledged record ever
        sits behind them (reading back stops at the first bad record)."""
        if self._handle is not None:
            with contextlib.suppress(OSError):  # closing flushes the rest, which may fail
                self._handle.close()
            self._handle = None
        try:
            os.truncate(segment.path, segment.size)
        except OSError as exc:
            logger.warning("otel-safety spool: cannot cut %s back: %s", segment.path, exc)
        self._close_current()

    def _close_current(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None
        number, self._current = self._current, None
        segment = self._segments.get(number) if number is not None else None
        if number is not None and segment is not None:
            segment.closed = True
            if segment.finished:
                self._delete(number)

    def _delete(self, number: int) -> None:
        segment = self._segments.pop(number)
        for path in (segment.path, segment.notes):  # the notes last: never without them
            try:
                path.unlink()
            except FileNotFoundError:
                pass
            except OSError as exc:
                logger.warning("otel-safety spool: cannot delete %s: %s", path, exc)


def _segment_number(path: Path) -> int | None:
    try:
        return int(path.name.removesuffix(SEGMENT_SUFFIX))
    except ValueError:
        return None


def _note_release(notes: Path, index: int) -> None:
    """Write one release down (one small append: whole or absent after a crash). A note
    that cannot be written costs a request judged twice after a crash, not a lost one."""
    try:
        with open(notes, "ab") as handle:
            handle.write(_RELEASED.pack(index))
    except OSError as exc:
        logger.warning("otel-safety spool: cannot note a release in %s: %s", notes, exc)


def _released(notes: Path, records: int) -> set[int]:
    """The records of a segment its notes say were released (a torn last note ignored)."""
    try:
        data = notes.read_bytes()
    except FileNotFoundError:
        return set()
    except OSError as exc:  # unreadable: every record is read back (twice judged, none lost)
        logger.warning("otel-safety spool: cannot read the releases in %s: %s", notes, exc)
        return set()
    whole = len(data) - len(data) % _RELEASED.size
    return {n for (n,) in _RELEASED.iter_unpack(data[:whole]) if n < records}


def _read(path: Path) -> Iterator[tuple[int, bytes]]:
    """The whole records of a segment, with where each payload starts; a torn or corrupt
    tail ends it (logged)."""
    data = path.read_bytes()
    offset = 0
    while offset + _HEADER.size <= len(data):
        length, crc = _HEADER.unpack_from(data, offset)
        start = offset + _HEADER.size
        payload = data[start : start + length]
        if len(payload) < length or zlib.crc32(payload) != crc:
            break
        yield start, payload
        offset = start + length
    if offset < len(data):
        logger.warning(
            "otel-safety spool: %s ends with %d bytes of a record cut short (never "
            "acknowledged); ignored",
            path,
            len(data) - offset,
        )
