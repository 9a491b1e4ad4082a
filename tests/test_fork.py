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
