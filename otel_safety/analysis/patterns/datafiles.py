"""Detector data (corpora, lexicons, taxonomies) as versioned TOML that users extend.

Each detector's data lives in `otel_safety/detectors/data/<name>.toml`. A deployment adds
its own phrases or entities without forking: a file of the same name in the directory named
by `Settings.data_dir` (OTEL_SAFETY_DATA_DIR) is merged over the packaged one (lists extend,
tables merge, numbers and strings replace), so a user file can add rules but never silently
drop ours. `build_pipeline` hands the settings' folder down with `use_data_files`; a library
call made without it (`run_over_refusal(entry)`) reads the setting's variable.
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable, Mapping
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

from otel_safety.analysis import linear
from otel_safety.analysis.memo import MISSING, depends_on, in_scope
from otel_safety.config import env_name, from_environment

__all__ = [
    "DATA_DIR_ENV",
    "DATA_VERSION",
    "UserText",
    "current_data_dir",
    "current_scope_taxonomy",
    "load_compiled",
    "load_data",
    "merge",
    "read_toml",
    "stray_data_files",
    "use_data_files",
]

DATA_DIR_ENV = env_name("data_dir")
DATA_VERSION = 1

Compiled = TypeVar("Compiled")


class UserText(str):
    """A string read from a user's data file, not a packaged one, with the file it came from.

    Patterns a user adds must run in linear time by construction (see
    `data_patterns.compile_pattern`); this is how the compiler tells them from ours and names
    the file in its error.
    """

    path: str

    def __new__(cls, text: str, path: str) -> UserText:
        made = super().__new__(cls, text)
        made.path = path
        return made

    def __reduce__(self) -> tuple[Any, ...]:
        return UserText, (str(self), self.path)


def _marked(value: Any, path: str) -> Any:
    """`value` with every string in it (not keys) a `UserText` from `path`."""
    if isinstance(value, str):
        return UserText(value, path)
    if isinstance(value, list):
        return [_marked(item, path) for item in value]
    if isinstance(value, Mapping):
        return {key: _marked(item, path) for key, item in value.items()}
    return value


# The settings' values handed down by `build_pipeline`, where they differ from what the
# variables say; read on every trace, so a plain dict lookup.
_handed_down: dict[str, str | None] = {}


def use_data_files(data_dir: str | None, scope_taxonomy: str | None) -> None:
    """Make the settings' data folder and extra taxonomy file the ones this process's
    detectors read. None, or a value equal to its variable's, is left to the variable, which
    is then read live as before (a changed variable is still seen, by settings resolved
    without the environment too)."""
    for field, value in (("data_dir", data_dir), ("scope_taxonomy", scope_taxonomy)):
        if value is None or value == from_environment(field):
            _handed_down.pop(field, None)
        else:
            _handed_down[field] = value


def current_data_dir() -> str | None:
    """The detector data folder in force: the settings' handed down, else the variable's
    (read once per judging scope: a trace asks for it at every detector)."""
    found = in_scope(current_data_dir)
    if found is not MISSING:
        return found
    if "data_dir" in _handed_down:
        return _handed_down["data_dir"]
    return from_environment("data_dir")


def current_scope_taxonomy() -> str | None:
    """The extra scope taxonomy file in force, as `current_data_dir` decides."""
    found = in_scope(current_scope_taxonomy)
    if found is not MISSING:
        return found
    if "scope_taxonomy" in _handed_down:
        return _handed_down["scope_taxonomy"]
    return from_environment("scope_taxonomy")


depends_on(current_data_dir)  # analyses memoised under one data folder serve only it
depends_on(current_scope_taxonomy)


def load_data(
    name: str, extra_file: str | None = None, data_dir: str | None = None
) -> dict[str, Any]:
    """Packaged `<name>.toml`, then `<data_dir>/<name>.toml`, then `extra_file`.

    Reads the files on every call: callers compile the result once and cache it keyed on
    `current_data_dir()` (and their own extra file), so a changed setting is picked up.
    """
    packaged = resources.files("otel_safety.detectors") / "data" / f"{name}.toml"
    data = tomllib.loads(packaged.read_text(encoding="utf-8"))
    _check_version(data, f"packaged {name}.toml")
    overlays: list[str] = []
    if data_dir:
        if not Path(data_dir).is_dir():
            raise ValueError(f"{DATA_DIR_ENV}={data_dir} is not a directory")
        if (Path(data_dir) / f"{name}.toml").is_file():
            overlays.append(str(Path(data_dir) / f"{name}.toml"))
    if extra_file:
        overlays.append(extra_file)
    for path in overlays:
        user = read_toml(path)
        if "version" not in user:
            raise ValueError(f"{path}: say which data version it is written for (version = 1)")
        unknown = sorted(set(user) - set(data))
        if unknown:
            raise ValueError(
                f"{path}: unknown section(s) {', '.join(unknown)}; {name}.toml has "
                f"{', '.join(sorted(k for k in data if k != 'version'))}"
            )
        data = merge(data, _marked(user, path))
    return data


def load_compiled(
    name: str,
    compile_data: Callable[[dict[str, Any]], Compiled],
    label: str,
    data_dir: str | None = None,
    extra_file: str | None = None,
) -> Compiled:
    """`load_data(name, ...)` turned into a detector's rules by `compile_data`.

    Any error, from reading a file to a bad pattern, is raised as a ValueError that starts
    with `label` ("injection rules: ..."), so a user sees which detector's data is broken.
    """
    try:
        data = load_data(name, extra_file, data_dir)
        if user_files(name, data_dir, extra_file):
            return compile_data(data)
        with linear.packaged_patterns():  # ours alone: compiled on first need
            return compile_data(data)
    except ValueError as exc:
        sources = _sources(name, extra_file, data_dir)
        raise ValueError(f"{label}: {exc} (read from {sources})") from exc


def user_files(name: str, data_dir: str | None, extra_file: str | None = None) -> list[str]:
    """The user's files that extend packaged `<name>.toml`: `<data_dir>/<name>.toml` where it
    exists, and `extra_file`."""
    found = []
    if data_dir and (Path(data_dir) / f"{name}.toml").is_file():
        found.append(str(Path(data_dir) / f"{name}.toml"))
    if extra_file:
        found.append(extra_file)
    return found


def _sources(name: str, extra_file: str | None, data_dir: str | None) -> str:
    """The files a detector's data was read from, for its errors: a user can tell whether
    the bad entry is theirs or packaged."""
    return " + ".join([f"packaged {name}.toml", *user_files(name, data_dir, extra_file)])


def read_toml(path: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as handle:
            data = tomllib.load(handle)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"cannot read detector data file {path}: {exc}") from exc
    _check_version(data, path)
    return data


def merge(base: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """Lists extend, tables merge, scalars replace: a user file can only add rules."""
    merged = dict(base)
    for key, value in extra.items():
        current = merged.get(key)
        if isinstance(current, Mapping) and isinstance(value, Mapping):
            merged[key] = merge(current, value)
        elif isinstance(current, list) and isinstance(value, list):
            merged[key] = [*current, *(item for item in value if item not in current)]
        else:
            merged[key] = value
    return merged


def _check_version(data: Mapping[str, Any], where: str) -> None:
    version = data.get("version", DATA_VERSION)
    if version != DATA_VERSION:
        raise ValueError(f"{where}: data version {version!r} is not supported (use {DATA_VERSION})")


def data_folder_line(data_dir: str) -> str:
    """The data folder and the files in it the detectors read: what a user's customisation
    amounts to, said where a command starts."""
    packaged = _packaged_names()
    folder = Path(data_dir)
    read = sorted(p.name for p in folder.glob("*.toml") if p.name in packaged)
    return f"data folder: {data_dir} ({', '.join(read) if read else 'no data file read'})"


def _packaged_names() -> set[str]:
    return {
        entry.name
        for entry in (resources.files("otel_safety.detectors") / "data").iterdir()
        if entry.name.endswith(".toml")
    }


def stray_data_files(data_dir: str) -> list[str]:
    """Files in a user's data folder that no detector reads (a misspelt name would otherwise
    be ignored in silence), each as a problem to report."""
    packaged = _packaged_names()
    folder = Path(data_dir)
    if not folder.is_dir():
        return [f"{DATA_DIR_ENV}={data_dir} is not a directory"]
    return [
        f"{path}: no detector reads it; the data files are {', '.join(sorted(packaged))}"
        for path in sorted(folder.glob("*.toml"))
        if path.name not in packaged
    ]
