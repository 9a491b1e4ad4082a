"""A pre-fork server's workers: each forked copy of the app judges and stores its own spans."""

from __future__ import annotations

import json
import os

import duckdb
import pytest

import otel_safety


def _agent_runs(provider, who: str, count: int) -> None:
    tracer = provider.get_tracer("fork-test")
    for number in range(count):
        with (
            tracer.start_as_current_span(
                "invoke_agent helper",
                attributes={"gen_ai.operation.name": "invoke_agent", "who": who},
            ),
            tracer.start_as_current_span(
                "execute_tool run_shell",
                attributes={
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": "run_shell",
                    "gen_ai.tool.call.arguments": json.dumps({"command": f"ls /tmp/{number}"}),
                    "who": who,
                },
            ),
        ):
            pass


@pytest.mark.process
@pytest.mark.parametrize("detection", ["process", "thread"])
def test_a_forked_child_judges_and_stores_its_spans_and_not_the_parents(
    tmp_path, monkeypatch, detection
):
    monkeypatch.setenv("OTEL_SAFETY_DETECTION", detection)
    db = tmp_path / "fork.duckdb"
    provider = otel_safety.configure(str(db), install=False, otlp=False)
    _agent_runs(provider, "parent-before", 3)  # queued or buffered in the parent at the fork
    pid = os.fork()
    if pid == 0:  # the child never returns into pytest
        code = 1
        try:
            _agent_runs(provider, "child", 5)
            provider.shutdown()
            code = 0
        finally:
            os._exit(code)
    _agent_runs(provider, "parent-after", 2)
    _, status = os.waitpid(pid, 0)
    provider.shutdown()
    assert os.waitstatus_to_exitcode(status) == 0
    with duckdb.connect(str(db), read_only=True) as con:
        stored = dict(
            con.execute(
                "SELECT json_extract_string(attributes, '$.who') AS who, count(*) FROM spans "
                "GROUP BY who"
            ).fetchall()
        )
        judged = con.execute(
            "SELECT count(DISTINCT trace_id) FROM traces WHERE trace_id IN "
            "(SELECT trace_id FROM spans WHERE json_extract_string(attributes, '$.who') = 'child')"
        ).fetchone()[0]
    assert stored == {"parent-before": 6, "child": 10, "parent-after": 4}  # each span once
    assert judged == 5


_CHILDREN_EXIT = """
import json, os, sys
import otel_safety

provider = otel_safety.configure(sys.argv[1], install=False, otlp=False, store_keep_open=60)
with provider.get_tracer("fork-exit").start_as_current_span(
    "invoke_agent helper", attributes={"gen_ai.operation.name": "invoke_agent"}
):
    pass
provider.force_flush()  # written, and the file kept open across the forks below
statuses = []
for _ in range(8):
    pid = os.fork()
    if pid == 0:
        sys.exit(0)  # as a pre-fork server's worker ends: atexit, then finalisation
    statuses.append(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
provider.shutdown()
print(json.dumps(statuses))
"""


@pytest.mark.process
def test_forked_children_that_exit_normally_do_not_abort_or_touch_the_parents_store(tmp_path):
    """A child used to free the DuckDB databases it inherited (the default connection
    `import duckdb` opens, the store's open connection) and abort at exit, joining threads
    that exist only in the parent, in about four exits of ten."""
    import subprocess
    import sys

    script = tmp_path / "children_exit.py"
    script.write_text(_CHILDREN_EXIT)
    db = tmp_path / "exit.duckdb"
    done = subprocess.run(
        [sys.executable, str(script), str(db)], capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [0] * 8, done.stderr[-2000:]
    assert "terminate called" not in done.stderr
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM spans").fetchone()[0] == 1
