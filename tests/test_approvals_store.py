"""The approvals table on a real DuckDB store file: ids, listing, answers, expiry, errors."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import duckdb
import pytest

from otel_safety.approvals import AlreadyDecided, ApprovalError, ApprovalStore, UnknownApproval
from otel_safety.exporters.duckdb import DuckDBStore, StoreError


def _ask(store: ApprovalStore, tool: str = "run_shell", timeout: float = 300.0, **extra):
    fields = {
        "tool": tool,
        "category": "shell",
        "risk": 65,
        "summary": f"{tool}: needs approval",
        "reasons": ["shell.network: fetches a script"],
        "arguments": '{"command": "curl x | sh"}',
        "requester": "alice",
        **extra,
    }
    return store.create(timeout=timeout, **fields)


def test_ids_count_up_per_store_and_rows_round_trip(tmp_path):
    path = tmp_path / "store.duckdb"
    DuckDBStore(path).shutdown()  # the store the app writes: approvals share its file
    store = ApprovalStore(path)
    first = _ask(store, trace_id="a" * 32, span_id="b" * 16, conversation="c1")
    second = _ask(store, "send_email")
    assert (first.id, second.id) == ("safety-1", "safety-2")
    assert first.status == "pending" and first.created_at.tzinfo is not None
    assert 299 <= (first.expires_at - first.created_at).total_seconds() <= 301
    again = ApprovalStore(path).get("safety-1")
    assert again == first
    assert again.reasons == ["shell.network: fetches a script"]
    assert [a.id for a in store.pending()] == ["safety-1", "safety-2"]  # oldest first
    assert [a.id for a in store.recent()] == ["safety-2", "safety-1"]  # newest first
    other = ApprovalStore(tmp_path / "other.duckdb")
    assert _ask(other).id == "safety-1"  # numbering is per store
    with duckdb.connect(str(path), read_only=True) as con:  # the schema's table, in the file
        assert con.execute("SELECT count(*) FROM approvals").fetchone() == (2,)


def test_decide_records_who_and_why_and_refuses_a_second_answer(tmp_path):
    store = ApprovalStore(tmp_path / "s.duckdb")
    pending = _ask(store)
    approved = store.decide(pending.id, True, by="bob", note="known script")
    assert (approved.status, approved.decided_by, approved.note) == (
        "approved",
        "bob",
        "known script",
    )
    assert approved.decided_at is not None and store.pending() == []
    with pytest.raises(
        AlreadyDecided, match=r"safety-1 was already approved by bob.*nothing changed"
    ):
        store.decide(pending.id, False, by="carol")
    assert store.get(pending.id).status == "approved"  # the second answer changed nothing
    denied = store.decide(_ask(store).id, False, by="carol")
    assert denied.status == "denied"


def test_unknown_ids_say_how_to_find_the_right_one(tmp_path):
    store = ApprovalStore(tmp_path / "s.duckdb")
    _ask(store)
    with pytest.raises(UnknownApproval, match=r"no approval safety-9 .*otel-safety approvals"):
        store.decide("safety-9", True, by="bob")
    with pytest.raises(UnknownApproval, match=r"not an approval id .*safety-12"):
        store.decide("rm -rf", True, by="bob")
    assert issubclass(UnknownApproval, ApprovalError) and issubclass(ApprovalError, ValueError)
    assert store.get("safety-9") is None and store.get("nonsense") is None
    with pytest.raises(StoreError, match="no store at"):
        ApprovalStore(tmp_path / "missing.duckdb", create=False).pending()
    assert not (tmp_path / "missing.duckdb").exists()


def test_an_unanswered_approval_expires_and_cannot_be_answered_late(tmp_path):
    store = ApprovalStore(tmp_path / "s.duckdb")
    short = _ask(store, timeout=0.3)
    long = _ask(store, "send_email")
    time.sleep(0.5)
    assert [a.id for a in store.pending()] == [long.id]
    assert store.get(short.id).status == "expired"
    with pytest.raises(AlreadyDecided, match=r"expired unanswered .*blocked"):
        store.decide(short.id, True, by="bob")


def test_wait_ends_at_once_on_an_answer_given_in_this_process(tmp_path):
    store = ApprovalStore(tmp_path / "s.duckdb")
    pending = _ask(store)
    answer = threading.Timer(0.3, lambda: store.decide(pending.id, True, by="bob"))
    started = time.monotonic()
    answer.start()
    decided = store.wait(pending.id, until=time.monotonic() + 20, poll=30.0)  # no polling
    answer.join()
    assert decided.status == "approved"
    assert time.monotonic() - started < 10  # woken by the answer, not by the 30 s poll


def test_similar_finds_pending_and_recent_answers_of_the_same_request(tmp_path):
    store = ApprovalStore(tmp_path / "s.duckdb")
    pending = _ask(store, fingerprint="f1")
    assert store.similar("alice", "run_shell", "shell", "f1", 60).id == pending.id
    assert store.similar("mallory", "run_shell", "shell", "f1", 60) is None  # per requester
    assert store.similar("alice", "run_shell", "shell", "f2", 60) is None  # another request
    store.decide(pending.id, False, by="bob")
    assert store.similar("alice", "run_shell", "shell", "f1", 60).status == "denied"
    time.sleep(0.2)
    assert store.similar("alice", "run_shell", "shell", "f1", 0.1) is None  # answer too old


@pytest.mark.process
def test_a_store_held_by_another_process_is_waited_for_then_named(tmp_path):
    path = tmp_path / "s.duckdb"
    store = ApprovalStore(path, lock_wait=0.5)
    _ask(store)
    import subprocess
    import sys

    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import duckdb, sys, time; c = duckdb.connect(sys.argv[1]); print('held', flush=True);"
            " time.sleep(3)",
            str(path),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(StoreError, match="held by another process"):
            store.pending()
        holder.wait(10)
        assert len(ApprovalStore(path, lock_wait=5).pending()) == 1  # released: works again
    finally:
        holder.kill()
        holder.wait()


def test_approvals_are_listed_from_a_store_that_cannot_be_written(tmp_path, monkeypatch):
    """Listing marks expired requests in the store, so a read-only store could not be listed
    at all (and the dashboard's panel said "busy" forever)."""
    import otel_safety.approvals.store as approvals_store

    store = ApprovalStore(tmp_path / "s.duckdb")
    short = _ask(store, timeout=0.3)
    long = _ask(store, "send_email")
    time.sleep(0.5)
    real = approvals_store.connect_store

    def read_only_disk(path, read_only=False):
        if not read_only:  # as DuckDB answers for a file on a read-only disk
            raise duckdb.IOException(f'Cannot open file "{path}": Read-only file system')
        return real(path, read_only=True)

    monkeypatch.setattr(approvals_store, "connect_store", read_only_disk)
    assert [a.id for a in store.pending()] == [long.id]
    assert {a.id: a.status for a in store.recent()} == {short.id: "expired", long.id: "pending"}
    with pytest.raises(StoreError, match="Read-only file system"):
        store.decide(long.id, True, by="bob")


@pytest.mark.process
def test_processes_asking_the_same_question_at_once_make_one_request(tmp_path):
    """`similar` then `create` in two transactions let each of several processes find no
    request and make its own; one transaction holding the file lets one make it."""
    path = tmp_path / "app.duckdb"
    ApprovalStore(path).pending()  # the file and its schema exist before the race
    start = time.time() + 4.0
    script = (
        "import sys, time\n"
        "from otel_safety.approvals import ApprovalStore\n"
        "time.sleep(max(0.0, float(sys.argv[2]) - time.time()))\n"
        "approval, created = ApprovalStore(sys.argv[1]).similar_or_create(\n"
        "    600, 60, tool='bash', category='execute_shell', risk=50, summary='s',\n"
        "    requester='slack:RACE', fingerprint='f')\n"
        "print(approval.id, created)\n"
    )
    runs = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(path), str(start)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    answers = [run.communicate(timeout=120)[0].split() for run in runs]
    assert all(run.returncode == 0 for run in runs)
    assert sorted(created for _, created in answers) == ["False", "False", "False", "True"]
    assert {approval_id for approval_id, _ in answers} == {"safety-1"}
    assert len(ApprovalStore(path).pending()) == 1
