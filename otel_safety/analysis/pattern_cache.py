"""What compiling the detectors' patterns produces, kept on disk so the next process reads it.

`regex` parses a pattern in Python: the thousand-odd patterns a judging process compiles as
traces reach them cost it more CPU than the traces it judges first, and every `ingest`,
`serve` worker and detection process paid it again. A compiled `regex` pattern pickles with
its compiled code (`regex` registers this itself), so a pattern compiled once on this machine
is loaded later by one C call. Other pure results of pattern work (a family's relaxed
alternation) are kept alike, keyed by everything they are computed from.

The file lives in `OTEL_SAFETY_PATTERN_CACHE` (a folder; `off` keeps nothing), by default
`$XDG_CACHE_HOME/otel-safety` or `~/.cache/otel-safety`, one per `regex` and Python version.
It is only ever a shortcut: a file that is missing, damaged, of another version or not
writable is ignored (the patterns are compiled as before), and it holds nothing but
patterns and the plain values computed from them; loading it builds no object other than
`regex` patterns. Entries are checked by a digest of the whole file before they are read.
New entries are written at exit and, in long-running processes, at most once a minute
(`save_if_due`), merged with what other processes wrote meanwhile.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import hashlib
import io
import logging
import os
import pickle
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Hashable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import regex

from otel_safety.config import from_environment

__all__ = ["cache_file", "compiled", "remembered", "save", "save_if_due", "stats", "unsaved"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

OFF = ("off", "none", "0", "false")
_FORMAT = 2
_MAGIC = b"otel-safety pattern cache\n"
_DIGEST = hashlib.sha256
_DIGEST_SIZE = _DIGEST().digest_size
_MAX_ENTRIES = 50_000  # beyond it, a save keeps this process's entries only
_SAVE_EVERY = 60.0  # seconds between the saves of a long-running process
_ALLOWED_GLOBALS = {("regex._regex", "compile")}

_lock = threading.RLock()
# Entries are kept pickled one by one: loading the file reads bytes, and only the patterns
# this process asks for are built (an app's process asks for one or two, not thousands).
_loaded: dict[Hashable, bytes] | None = None  # what the file held, once read
_new: dict[Hashable, bytes] = {}  # computed here since the last save
_objects: dict[Hashable, Any] = {}  # entries built (or computed) in this process
_last_save = time.monotonic()
_counts = {"hits": 0, "misses": 0, "saves": 0}
_at_exit = False


def cache_file() -> Path | None:
    """The file in force, or None when the cache is off or no folder can be named."""
    setting = from_environment("pattern_cache")
    if setting is not None and setting.lower() in OFF:
        return None
    if setting is not None:
        folder = Path(setting).expanduser()
    else:
        base = os.environ.get("XDG_CACHE_HOME") or (
            str(Path.home() / ".cache") if _has_home() else None
        )
        if base is None:
            return None
        folder = Path(base) / "otel-safety"
    version = sys.version_info
    return folder / (
        f"patterns-v{_FORMAT}-regex{regex.__version__}-py{version[0]}.{version[1]}.pickle"
    )


def _has_home() -> bool:
    try:
        Path.home()
    except RuntimeError:  # no HOME and no password entry
        return False
    return True


def compiled(source: str, flags: int = 0) -> regex.Pattern:
    """`regex.compile(source, flags)`, loaded from the cache when this machine compiled it
    before (a bad pattern raises `regex.error` as always: only good ones are kept)."""
    key = ("regex", source, int(flags), int(regex.DEFAULT_VERSION))
    found = _get(key)
    if found is not None:
        return found
    pattern = regex.compile(source, flags)
    _put(key, pattern)
    return pattern


def remembered(kind: str, key: Hashable, compute: Callable[[], T], code: Sequence[str]) -> T:
    """`compute()`, a pure function of `key` returning plain values (str, int, bool, None,
    tuples and frozensets of them), from the cache when it was computed before under `kind`
    by the same `code` (the modules that compute it: an entry made by other source is not
    read, so a changed rule never meets a result of the old one)."""
    fingerprint = _fingerprint(tuple(code))
    if fingerprint is None:  # the code cannot be read (a zipped install): nothing is kept
        return compute()
    full = (kind, fingerprint, key)
    found = _get(full)
    if found is not None:
        return found[0]
    value = compute()
    _put(full, (value,))
    return value


@functools.cache
def _fingerprint(modules: tuple[str, ...]) -> str | None:
    digest = _DIGEST()
    try:
        for name in modules:
            digest.update(Path(sys.modules[name].__file__ or name).read_bytes())
    except (KeyError, OSError, TypeError):
        return None
    return digest.hexdigest()[:16]


def stats() -> dict[str, int]:
    """Hits, misses and saves in this process (for benchmarks and tests)."""
    with _lock:
        return dict(_counts)


def unsaved() -> int:
    """Entries made here that are not in the file yet (a save that could not write leaves
    them)."""
    with _lock:
        return len(_new)


def _get(key: Hashable) -> Any:
    with _lock:
        found = None
        if cache_file() is not None:  # turned off since it was read: compile afresh
            found = _objects.get(key)
            if found is None:
                data = _new.get(key) or _entries().get(key)
                found = None if data is None else _loads(data)
                if found is not None:
                    _objects[key] = found
        _counts["hits" if found is not None else "misses"] += 1
        return found


def _put(key: Hashable, value: Any) -> None:
    global _at_exit
    with _lock:
        if cache_file() is None:
            return
        try:
            data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:  # a value of no plain kind: computed again next time
            logger.debug("otel-safety: pattern cache cannot keep %r: %s", key, exc)
            return
        _objects[key] = value
        _new[key] = data
        if not _at_exit:
            atexit.register(save)
            _at_exit = True


def _entries() -> dict[Hashable, bytes]:
    global _loaded
    if _loaded is None:
        path = cache_file()
        _loaded = _read(path) if path is not None else {}
    return _loaded


def save_if_due() -> None:
    """Save new entries when there are some and the last save is a minute old: for processes
    that judge for days and may never exit cleanly."""
    if _new and time.monotonic() - _last_save >= _SAVE_EVERY:
        save()


def save() -> None:
    """Write the new entries, merged with what the file holds now. Never raises: the cache
    is a shortcut, and a folder that cannot be written only means compiling again."""
    global _last_save, _loaded
    with _lock:
        _last_save = time.monotonic()
        path = cache_file()
        if not _new or path is None:
            return
        try:
            path.parent.mkdir(parents=True, exist_ok=True)  # fails before the file is read
            merged = _read(path)
            merged.update(_new)
            if len(merged) > _MAX_ENTRIES:
                merged = dict(_new)
            _write(path, merged)
        except Exception as exc:  # a full disk, a read-only home, a value that won't pickle
            logger.debug("otel-safety: pattern cache %s not written: %s", path, exc)
            return
        _counts["saves"] += 1
        _loaded = merged
        _new.clear()


def _write(path: Path, entries: dict[Hashable, bytes]) -> None:
    payload = pickle.dumps(entries, protocol=pickle.HIGHEST_PROTOCOL)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(_MAGIC + _DIGEST(payload).digest() + payload)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def _loads(data: bytes) -> Any:
    """One entry, built by the unpickler that builds patterns and plain values only."""
    try:
        return _PatternsOnly(io.BytesIO(data)).load()
    except Exception as exc:  # an entry of another build: computed again
        logger.debug("otel-safety: pattern cache entry not read: %s", exc)
        return None


def _read(path: Path) -> dict[Hashable, bytes]:
    """The entries in `path`, each still pickled; {} when the file is missing or cannot be
    trusted to be whole."""
    try:
        data = path.read_bytes()
    except OSError:
        return {}
    start = len(_MAGIC) + _DIGEST_SIZE
    if not data.startswith(_MAGIC) or _DIGEST(data[start:]).digest() != data[len(_MAGIC) : start]:
        logger.debug("otel-safety: pattern cache %s is damaged; compiling again", path)
        return {}
    try:
        entries = _PatternsOnly(io.BytesIO(data[start:])).load()
    except Exception as exc:  # a format of another build: compile again
        logger.debug("otel-safety: pattern cache %s not read: %s", path, exc)
        return {}
    if not isinstance(entries, dict) or not all(type(v) is bytes for v in entries.values()):
        return {}
    return entries


class _PatternsOnly(pickle.Unpickler):
    """Builds `regex` patterns and plain values, nothing else."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in _ALLOWED_GLOBALS:
            raise pickle.UnpicklingError(f"{module}.{name} is not a pattern")
        return super().find_class(module, name)
