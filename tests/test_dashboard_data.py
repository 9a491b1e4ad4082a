"""The dashboard without a browser: the span tree on hostile input, the resolution rule it
shares with the `flagged_traces` query, reads beside the writer, the missing extra."""

from __future__ import annotations

import sys
from datetime import datetime, timedelta

import pytest

from otel_safety.cli import main
from otel_safety.dashboard.data import open_alerts, span_tree
from otel_safety.extras import install_hint


def _span(span_id: str, parent: str | None) -> dict:
    return {"span_id": span_id, "parent_span_id": parent, "name": span_id}


def test_the_span_tree_is_depth_first_and_shows_every_span_once():
    spans = [
        _span("root", None),
        _span("a", "root"),
        _span("a1", "a"),
        _span("b", "root"),
        _span("orphan", "gone"),  # its parent never reached the store
        _span("x", "y"),  # a parent cycle: no root leads here
        _span("y", "x"),
    ]
    tree = span_tree(spans, [{"span_id": "a1", "detector": "injection"}])
    assert [(n.span["span_id"], n.depth) for n in tree[:5]] == [
        ("root", 0), ("a", 1), ("a1", 2), ("b", 1), ("orphan", 0),
    ]  # fmt: skip
    assert sorted(n.span["span_id"] for n in tree) == sorted(s["span_id"] for s in spans)
    assert [f["detector"] for n in tree for f in n.findings] == ["injection"]


def test_a_huge_trace_shows_the_first_rows_and_every_flagged_span():
    """A 30,000-span trace made an 8.5 MB page that took a browser 15 s to draw."""
    from otel_safety.dashboard.data import TREE_ROWS, _shown_rows

    spans = [_span("root", None), *(_span(f"s{n}", "root") for n in range(3 * TREE_ROWS))]
    tree = span_tree(spans, [{"span_id": f"s{2 * TREE_ROWS}", "detector": "tool_guard"}])
    shown = _shown_rows(tree)
    assert len(shown) == TREE_ROWS + 1
    assert shown[-1].span["span_id"] == f"s{2 * TREE_ROWS}" and shown[-1].findings


def test_the_resolution_shown_is_the_one_in_force_after_a_reopening():
    """Reopening the whole trace left its own resolution shown as the one in force, where
    an older resolution of the one detector that fired is what keeps the trace resolved."""
    from otel_safety.dashboard.data import TraceDetail

    history = [  # newest first
        {"detector": None, "resolved": False, "resolution_notes": "reopened"},
        {"detector": None, "resolved": True, "resolution_notes": "whole trace ok"},
        {"detector": "scope_escalation", "resolved": True, "resolution_notes": "only scope"},
    ]
    detail = TraceDetail("t", None, [], [], [], history)
    assert detail.latest_resolution["resolution_notes"] == "only scope"
    reopened = [{"detector": "scope_escalation", "resolved": False}, *history[2:]]
    assert TraceDetail("t", None, [], [], [], reopened).latest_resolution is None


def _resolution(detector: str | None, resolved: bool) -> dict:
    return {"detector": detector, "resolved": resolved}


@pytest.mark.parametrize(
    ("history", "still_open", "resolved"),
    [
        ([], ["deception", "injection"], False),
        ([_resolution("injection", True)], ["deception"], False),
        ([_resolution("injection", True), _resolution("deception", True)], [], True),
        ([_resolution("injection", False), _resolution("injection", True)],
         ["deception", "injection"], False),  # newest first: reopened after resolving
        ([_resolution(None, True)], [], True),
        ([_resolution(None, False), _resolution(None, True)], ["deception", "injection"], False),
    ],
)  # fmt: skip
def test_open_alerts_follow_the_latest_resolution(history, still_open, resolved):
    fired = [{"detector": "injection"}, {"detector": "deception"}, {"detector": "injection"}]
    assert open_alerts(fired, history) == (still_open, resolved)


def test_a_resolution_leaves_open_an_alert_judged_after_it():
    """A late span's HARD_STOP, judged after the trace was resolved, was hidden by it."""
    at = datetime(2026, 12, 6, 12, 0)
    whole = [{"detector": None, "resolved": True, "resolved_at": at}]
    before = {"detector": "injection", "evaluated_at": at - timedelta(minutes=5)}
    after = {"detector": "tool_guard", "evaluated_at": at + timedelta(seconds=20)}
    assert open_alerts([before], whole) == ([], True)
    assert open_alerts([before, after], whole) == (["tool_guard"], False)
    one = [{"detector": "tool_guard", "resolved": True, "resolved_at": at}]
    assert open_alerts([after], one) == (["tool_guard"], False)


def test_reads_in_the_writing_process_leave_the_writer_its_file(tmp_path):
    """In `serve --dashboard` the store's writer opens the file about once a second while
    pages are read: a read-only connection would refuse it; one like the writer's shares."""
    import duckdb

    from otel_safety.dashboard.data import read
    from otel_safety.exporters.duckdb import DuckDBStore, connect_store

    db = tmp_path / "s.duckdb"
    DuckDBStore(db).shutdown()

    def write_meanwhile(con):
        writer = connect_store(db)  # as DuckDBStore opens it for a batch
        writer.execute("INSERT INTO labels (trace_id, detector, label) VALUES ('t', 'd', true)")
        writer.close()
        return con.execute("SELECT count(*) FROM labels").fetchone()[0]

    assert read(db, write_meanwhile, beside_writer=True) == 1
    with pytest.raises(duckdb.ConnectionException, match="different configuration"):
        read(db, write_meanwhile)  # a standalone dashboard reads read-only: not in `serve`


def test_without_the_dashboard_extra_the_command_says_what_to_install(
    tmp_path, monkeypatch, capsys
):
    from otel_safety.exporters.duckdb import DuckDBStore

    db = tmp_path / "s.duckdb"
    DuckDBStore(db).shutdown()
    monkeypatch.setitem(sys.modules, "starlette", None)  # as if not installed
    assert main(["dashboard", "--db", str(db), "--port", "0"]) == 1
    assert install_hint("dashboard") in capsys.readouterr().err


def test_a_store_gone_is_said_in_the_panel_and_a_locked_one_is_retried(tmp_path):
    """Every read failure was a 503, which htmx does not show: a deleted or replaced store
    left the old numbers on the page with no word of it."""
    from otel_safety.dashboard.app import _busy
    from otel_safety.dashboard.data import StoreBusy, read

    with pytest.raises(StoreBusy) as gone:
        read(tmp_path / "deleted.duckdb", lambda con: None)
    assert gone.value.lasting
    shown = _busy(gone.value)
    assert shown.status_code == 200 and b"cannot be read" in shown.body
    locked = _busy(StoreBusy("s.duckdb is held by another process (lock)"))
    assert locked.status_code == 503


@pytest.mark.process
def test_a_trace_page_header_counts_every_local_root_of_the_trace(tmp_path):
    """A part of the run another service sent under a remote parent is a row of its own: the
    header showed the first row's WARN and 3 spans beside the other's HARD_STOP finding."""
    import duckdb
    from test_resolve import judged_store

    from otel_safety.dashboard.data import trace_detail

    db = tmp_path / "store.duckdb"
    run = judged_store(db)["r2"]
    with duckdb.connect(str(db)) as con:
        [(spans, rank)] = con.execute(
            "SELECT span_count, escalation_rank FROM traces WHERE trace_id = ?", [run]
        ).fetchall()
        con.execute(
            "INSERT INTO traces BY NAME SELECT * REPLACE ('remote00remote00' AS root_span_id, "
            "'HARD_STOP' AS escalation_level, 5 AS escalation_rank, 1 AS span_count, "
            "'[\"tool_guard\"]' AS detectors_fired, trace_start + INTERVAL 1 MINUTE AS "
            "trace_start) FROM traces WHERE trace_id = ?",
            [run],
        )
        header = trace_detail(con, run).trace
    assert rank < 5
    assert (header["escalation_level"], header["span_count"]) == ("HARD_STOP", spans + 1)
    assert "tool_guard" in header["detectors_fired"]
