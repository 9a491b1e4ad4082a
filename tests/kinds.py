"""Test kinds as markers, kept true by the suite itself.

`process` (starts a child process: the CLI, `serve`, a detection worker, an instrumented
app), `browser` (headless Chromium) and `postgres` (a PostgreSQL server) are set by hand;
every other test is `unit`, so `pytest -m unit` (`make test-unit`) is the fast loop. A
`unit` test that starts a child process anyway fails at teardown, naming the command, so a
marker can never silently go stale.
"""

from __future__ import annotations

import multiprocessing.process
import platform
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

SLOW_KINDS = ("process", "browser", "postgres")

_started: list[str] | None = None  # commands started during the current unit test
_popen_init = subprocess.Popen.__init__
_process_start = multiprocessing.process.BaseProcess.start


def _recording_popen_init(self: subprocess.Popen, *args: Any, **kwargs: Any) -> None:
    if _started is not None:
        command = args[0] if args else kwargs.get("args")
        _started.append(str(command)[:160])
    _popen_init(self, *args, **kwargs)


def _recording_process_start(self: multiprocessing.process.BaseProcess) -> None:
    if _started is not None:
        _started.append(f"multiprocessing: {self.name}")
    _process_start(self)


subprocess.Popen.__init__ = _recording_popen_init  # type: ignore[method-assign]
multiprocessing.process.BaseProcess.start = _recording_process_start  # type: ignore[method-assign]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "unit: in-process only (the default for unmarked tests)")
    config.addinivalue_line("markers", "process: starts a child process")
    config.addinivalue_line("markers", "browser: drives headless Chromium")
    config.addinivalue_line("markers", "postgres: runs a PostgreSQL server")
    # The standard library runs `uname -p` once per process, on the first call, for
    # whichever test first builds an OpenAI client (its platform headers): not that test's.
    platform.processor()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if not any(item.get_closest_marker(kind) for kind in SLOW_KINDS):
            item.add_marker(pytest.mark.unit)


@pytest.fixture(autouse=True)
def _unit_tests_start_no_process(request: pytest.FixtureRequest) -> Iterator[None]:
    global _started
    if request.node.get_closest_marker("unit") is None:
        yield
        return
    _started = []
    try:
        yield
        started = list(_started)
    finally:
        _started = None
    if started:
        pytest.fail(
            "this test starts a child process but is marked unit: mark it "
            f"@pytest.mark.process (started: {started[0]})",
            pytrace=False,
        )
