"""`configure()` and `create_processor()` as apps call them: what they refuse up front, what
they join, and what a forked worker or an app that exits early is left with."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import duckdb
import pytest
from store_holder import HeldStore

import otel_safety
from otel_safety.config import ConfigError


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"db_path": ""}, "needs a file path"),
        ({"detectors": ""}, "no detector key"),
        ({"detectors": " , "}, "no detector key"),
    ],
)
def test_a_choice_that_would_judge_or_store_nothing_is_refused(options, message) -> None:
    """`configure("")` started, then every write failed; `detectors=""` was no keys."""
    with pytest.raises(ConfigError, match=message):
        otel_safety.create_processor(**options)


def test_detectors_may_be_named_as_the_variable_names_them(tmp_path) -> None:
    processor = otel_safety.create_processor(
        str(tmp_path / "app.duckdb"), detectors="tool_guard, scope_escalation", detection="thread"
    )
    try:
        assert [key for key, _ in processor.engine.pipeline.in_force()] == [
            "tool_guard",
            "scope_escalation",
        ]
    finally:
        processor.shutdown()


def test_without_installing_configure_still_joins_the_apps_logger_provider(tmp_path) -> None:
    """`install=False` leaves the global providers alone; an SDK LoggerProvider the app set
    up is still the one findings go to and GenAI content is read from."""
    from opentelemetry._logs import _internal as global_logs
    from opentelemetry.sdk._logs import LoggerProvider

    app_logs = LoggerProvider()
    previous = global_logs._LOGGER_PROVIDER  # as set_logger_provider sets it, undone after
    global_logs._LOGGER_PROVIDER = app_logs
    try:
        provider = otel_safety.configure(
            str(tmp_path / "app.duckdb"), install=False, detection="thread"
        )
        try:
            joined = app_logs._multi_log_record_processor._log_record_processors
            assert any(type(p).__name__ == "SafetyLogRecordProcessor" for p in joined)
        finally:
            provider.shutdown()
    finally:
        global_logs._LOGGER_PROVIDER = previous
        app_logs.shutdown()


@pytest.mark.process
def test_an_app_that_exits_at_once_leaves_no_traceback_from_its_detection_process(tmp_path):
    """The detection process found its pipe closed while saying it was ready and printed a
    BrokenPipeError on the user's terminal after their app had ended."""
    script = textwrap.dedent(
        f"""
        import os, otel_safety
        otel_safety.configure({str(tmp_path / "app.duckdb")!r})
        os._exit(0)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )  # returns once every holder of the pipes, the detection process too, has exited
    assert done.returncode == 0
    assert "Traceback" not in done.stderr and "BrokenPipeError" not in done.stderr, done.stderr


@pytest.mark.process
def test_a_forked_worker_keeps_the_apps_duckdb_threads(tmp_path) -> None:
    """The default connection's threads are paused for the fork; the child got them back
    only in the parent, so an app's own DuckDB queries ran on one thread in every worker."""
    before = duckdb.execute("SELECT current_setting('threads')").fetchone()[0]
    duckdb.execute("SET threads TO 2")
    provider = otel_safety.configure(str(tmp_path / "app.duckdb"), install=False)
    read, write = os.pipe()
    try:
        child = os.fork()
        if child == 0:  # pragma: no cover - the child reports through the pipe
            threads = duckdb.execute("SELECT current_setting('threads')").fetchone()[0]
            os.write(write, str(threads).encode())
            os._exit(0)
        os.close(write)
        reported = os.read(read, 32).decode()
        os.waitpid(child, 0)
    finally:
        os.close(read)
        provider.shutdown()
    after = duckdb.execute("SELECT current_setting('threads')").fetchone()[0]
    duckdb.execute(f"SET threads TO {int(before)}")
    assert reported == "2" and after == 2


@pytest.mark.process
@pytest.mark.parametrize("slow_first_trace", [False, True], ids=["quick", "slow"])
def test_a_store_held_at_shutdown_costs_the_shutdown_its_own_time_not_thirty_seconds_more(
    tmp_path, span_factory, slow_first_trace, monkeypatch
) -> None:
    """The engine's shutdown waited its time for the store, then the store's own shutdown
    waited 30 s more: an app whose store another process held took a minute to exit. With
    a slow first trace (a loaded machine: CI found it) the worker is still judging when
    shutdown gives up on it, so nothing flushed the store before its own shutdown."""
    import time

    from otel_safety.pipeline import Pipeline

    if slow_first_trace:  # the first trace outlasts the budget, as compiling its patterns may
        judge = Pipeline.judge
        monkeypatch.setattr(
            Pipeline, "judge", lambda self, *args: (time.sleep(6), judge(self, *args))[1]
        )
    budget_ms = 2_000
    path = tmp_path / "app.duckdb"
    processor = otel_safety.create_processor(str(path), detection="thread")
    with HeldStore(path):
        for span in span_factory.agent_run(answer="I ran rm -rf / as asked."):
            processor.on_end(span)
        started = time.monotonic()
        processor.engine.shutdown(timeout_millis=budget_ms)
        elapsed = time.monotonic() - started
    assert elapsed < budget_ms / 1000 + 15, f"shutdown took {elapsed:.1f} s for {budget_ms} ms"


@pytest.mark.process
def test_an_app_starts_while_another_process_holds_its_store_and_writes_once_it_is_free(
    tmp_path, span_factory
) -> None:
    """A notebook's read-only connection to the store made `configure()` raise StoreError
    after ten seconds: the app did not start. The store now waits for the file instead."""
    import time

    path = tmp_path / "app.duckdb"
    otel_safety.create_processor(str(path), detection="thread", detectors=[]).shutdown()
    with HeldStore(path, read_only=True) as holder:
        started = time.monotonic()
        processor = otel_safety.create_processor(str(path), detection="thread")
        assert time.monotonic() - started < 8
        for span in span_factory.agent_run(answer="I ran rm -rf / as asked."):
            processor.on_end(span)
        holder.release()
    processor.shutdown()
    with duckdb.connect(str(path), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM spans").fetchone()[0] == 2
