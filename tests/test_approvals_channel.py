"""The guard's approvals channel for real: a guard waiting in one thread while a person
answers from another process (`otel-safety approve|deny` on the same DuckDB file), from
`serve`'s HTTP endpoint, or not at all; the webhook received by a real local server."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from loopback import LoopbackServer, QuietHandler
from sidecar_support import ServeProcess, free_port, run_command, wait_for

from otel_safety.approvals import ApprovalChannel, ApprovalStore
from otel_safety.approvals.request import fingerprint
from otel_safety.exporters.duckdb import DuckDBStore, StoreError
from otel_safety.guard import Decision, Directory, Guard, Verdict

WARNED = {"command": "chmod 777 run.sh"}  # the guard warns: a person decides


class GuardCall:
    """One guard check running on its own thread, as an agent's tool call would."""

    def __init__(self, guard: Guard, arguments: Any = None, requester: str = "alice") -> None:
        self.verdict: Verdict | None = None
        self.seconds = 0.0

        def run() -> None:
            started = time.monotonic()
            self.verdict = guard.check_tool_call(
                "bash", WARNED if arguments is None else arguments, requester,
                record=False, pace=False,
            )  # fmt: skip
            self.seconds = time.monotonic() - started

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def result(self, timeout: float = 30.0) -> Verdict:
        self.thread.join(timeout)
        assert self.verdict is not None, "the guard did not answer in time"
        return self.verdict


def _pending(path: Path, count: int = 1) -> list:
    store = ApprovalStore(path)
    return wait_for(
        lambda: (lambda found: found if len(found) >= count else None)(store.pending()),
        timeout=20,
        what=f"{count} pending approval(s)",
    )


def _guard(path: Path, **channel: Any) -> Guard:
    options = {"timeout": 30.0, "poll": 0.1, **channel}
    return Guard(Directory(), approvals=ApprovalChannel(path, **options))


@pytest.mark.process
@pytest.mark.parametrize(("verb", "decision"), [("approve", "ALLOW"), ("deny", "BLOCK")])
def test_the_cli_in_another_process_answers_a_waiting_guard(tmp_path, verb, decision):
    path = tmp_path / "app.duckdb"
    DuckDBStore(path).shutdown()  # the store the application writes
    call = GuardCall(_guard(path))
    (pending,) = _pending(path)
    assert pending.id == "safety-1" and pending.tool == "bash" and pending.requester == "alice"
    assert "chmod 777" in pending.arguments and "world_writable" in pending.summary

    listed = run_command("approvals", "--db", str(path))
    assert listed.returncode == 0 and "safety-1" in listed.stdout and "alice" in listed.stdout
    assert f"otel-safety approve ID --db {path}" in listed.stdout  # the hint runs as shown

    answered = run_command(verb, "safety-1", "--db", str(path), "--by", "bob", "--note", "checked")
    assert answered.returncode == 0, answered.stderr
    verdict = call.result()
    assert verdict.decision.value == decision
    assert verdict.approval == ("approved" if verb == "approve" else "denied")
    assert (verdict.approval_id, verdict.approval_by) == ("safety-1", "bob")  # for the audit
    said = "approved by bob" if verb == "approve" else "approval denied by bob"
    assert said in verdict.summary()  # the summary names who answered
    assert call.seconds < 25  # answered, not timed out
    stored = ApprovalStore(path).get("safety-1")
    assert (stored.status, stored.decided_by, stored.note) == (
        verdict.approval,
        "bob",
        "checked",
    )

    again = run_command("approve", "safety-1", "--db", str(path))  # a second answer
    assert again.returncode == 1
    assert f"safety-1 was already {verdict.approval} by bob" in again.stderr
    unknown = run_command("deny", "safety-7", "--db", str(path))
    assert unknown.returncode == 1 and "no approval safety-7" in unknown.stderr
    assert "otel-safety approvals" in unknown.stderr  # says how to find the right id


@pytest.mark.process
def test_an_unanswered_request_expires_and_blocks_within_its_timeout(tmp_path):
    path = tmp_path / "app.duckdb"
    call = GuardCall(_guard(path, timeout=1.0))
    verdict = call.result()
    assert verdict.decision is Decision.BLOCK and verdict.approval == "expired"
    assert 0.9 < call.seconds < 10
    assert ApprovalStore(path).get("safety-1").status == "expired"
    late = run_command("approve", "safety-1", "--db", str(path))
    assert late.returncode == 1 and "expired unanswered" in late.stderr


def test_timeout_follows_the_setting_and_defaults_to_five_minutes(tmp_path, monkeypatch):
    path = tmp_path / "app.duckdb"
    monkeypatch.delenv("OTEL_SAFETY_APPROVAL_TIMEOUT", raising=False)
    assert Guard(Directory(), approvals=path).approval.channel.timeout == 300
    monkeypatch.setenv("OTEL_SAFETY_APPROVAL_TIMEOUT", "0.5")
    guard = Guard(Directory(), approvals=path)
    assert guard.approval.channel.timeout == 0.5
    started = time.monotonic()
    verdict = guard.check_tool_call("bash", WARNED, "alice", record=False, pace=False)
    assert verdict.approval == "expired" and time.monotonic() - started < 10


def test_an_answer_is_reused_for_the_same_requester_and_a_similar_call(tmp_path):
    path = tmp_path / "app.duckdb"
    guard = _guard(path, reuse_within=600)
    call = GuardCall(guard)
    (pending,) = _pending(path)
    ApprovalStore(path).decide(pending.id, True, by="bob")
    assert call.result().approval == "approved"

    # Same call with other key order and spacing, in a new guard (another process would
    # see the same store): answered from the store, nobody asked again.
    similar = '{ "command" :  "chmod   777 run.sh" }'
    assert fingerprint(similar) == fingerprint(WARNED)
    fresh = _guard(path, reuse_within=600)
    reused = fresh.check_tool_call("bash", similar, "alice", record=False, pace=False)
    assert reused.approval == "approved" and reused.decision is Decision.ALLOW
    assert (reused.approval_id, reused.approval_by) == (pending.id, "bob")  # whose answer
    assert len(ApprovalStore(path).recent()) == 1

    # Another requester, or another command, is a new question.
    other = GuardCall(guard, requester="mallory")
    other_args = GuardCall(guard, arguments={"command": "chmod 777 deploy.sh"})
    assert {a.requester for a in _pending(path, 2)} == {"alice", "mallory"}
    for approval in ApprovalStore(path).pending():
        ApprovalStore(path).decide(approval.id, False, by="bob")
    assert other.result().approval == "denied" and other_args.result().approval == "denied"

    # Past the reuse window the answer no longer holds: asked again.
    short = _guard(path, reuse_within=0.2, timeout=0.5)
    time.sleep(0.3)
    expired = short.check_tool_call("bash", WARNED, "alice", record=False, pace=False)
    assert expired.approval == "expired" and expired.approval_by is None  # nobody answered
    assert expired.approval_id is not None
    assert len(ApprovalStore(path).recent()) == 4


def test_two_calls_waiting_on_the_same_question_make_one_request(tmp_path):
    path = tmp_path / "app.duckdb"
    guard = _guard(path)
    first, second = GuardCall(guard), GuardCall(guard)
    (pending,) = _pending(path)
    time.sleep(0.3)  # both are waiting now
    ApprovalStore(path).decide(pending.id, True, by="bob")
    assert first.result().approval == second.result().approval == "approved"
    assert len(ApprovalStore(path).recent()) == 1


class _Webhook:
    """A real HTTP server on 127.0.0.1 recording the JSON posted to it."""

    def __init__(self, status: int = 200) -> None:
        self.events: list[dict[str, Any]] = []
        events, code = self.events, status

        class Handler(QuietHandler):
            def do_POST(self) -> None:
                length = int(self.headers["Content-Length"])
                events.append(json.loads(self.rfile.read(length)))
                self.reply(b"ok", "text/plain", code)

        self.server = LoopbackServer(Handler)


def test_the_webhook_hears_of_the_request_and_of_its_answer(tmp_path):
    path = tmp_path / "app.duckdb"
    hook = _Webhook()
    with hook.server:
        channel = ApprovalChannel(
            path, timeout=30, poll=0.1, webhook=hook.server.endpoint,
            base_url="http://127.0.0.1:4318",
        )  # fmt: skip
        call = GuardCall(Guard(Directory(), approvals=channel))
        requested = wait_for(lambda: hook.events, what="the webhook's first event")[0]
        assert requested["event"] == "approval.requested" and requested["id"] == "safety-1"
        assert requested["status"] == "pending" and "chmod 777" in requested["arguments"]
        assert requested["approve"]["url"] == "http://127.0.0.1:4318/approvals/safety-1/approve"
        assert requested["deny"]["command"] == (f"otel-safety deny safety-1 --db {path.resolve()}")
        assert requested["summary"] in requested["text"] and "safety-1" in requested["text"]
        ApprovalStore(path).decide("safety-1", False, by="bob", note="not today")
        assert call.result().approval == "denied"
        closed = wait_for(lambda: hook.events[1:], what="the webhook's second event")[0]
        assert (closed["event"], closed["status"], closed["decided_by"]) == (
            "approval.closed",
            "denied",
            "bob",
        )
        channel.close()
    assert channel.stats()["webhook_sent"] == 2


def test_a_dead_or_failing_webhook_is_counted_and_never_holds_the_guard(tmp_path):
    path = tmp_path / "app.duckdb"
    dead = f"http://127.0.0.1:{free_port()}/hook"  # nothing listens there
    channel = ApprovalChannel(path, timeout=1.0, poll=0.1, webhook=dead)
    started = time.monotonic()
    verdict = Guard(Directory(), approvals=channel).check_tool_call(
        "bash", WARNED, "alice", record=False, pace=False
    )
    assert verdict.approval == "expired" and time.monotonic() - started < 10
    wait_for(lambda: channel.stats().get("webhook_failed") == 2, what="two failed posts")
    hook = _Webhook(status=500)
    with hook.server:
        refusing = ApprovalChannel(path, timeout=0.5, poll=0.1, webhook=hook.server.endpoint)
        Guard(Directory(), approvals=refusing).check_tool_call(
            "bash", {"command": "chmod 777 other.sh"}, "alice", record=False, pace=False
        )
        wait_for(lambda: refusing.stats().get("webhook_failed") == 2, what="two refused posts")
    assert len(hook.events) == 2  # it was reached; its 500 counts as a failure


def _http(method: str, url: str, token: str | None, body: bytes | None = None) -> tuple[int, Any]:
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url, body, headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


@pytest.mark.process
def test_serve_answers_approvals_over_http_behind_its_token(tmp_path):
    path = tmp_path / "serve.duckdb"
    token_file = tmp_path / "token"
    token_file.write_text("s3cret-token\n")
    with ServeProcess(
        "--db", str(path), "--token-file", str(token_file), "--workers", "0"
    ) as serve:
        assert f"approvals on {serve.http_url}/approvals" in serve.output
        base = f"{serve.http_url}/approvals"
        call = GuardCall(_guard(path))
        _pending(path)

        status, body = _http("GET", base, None)
        assert status == 401 and "bearer token" in body["error"]
        status, listed = _http("GET", base, "s3cret-token")
        assert status == 200 and [a["id"] for a in listed] == ["safety-1"]
        assert listed[0]["status"] == "pending" and listed[0]["tool"] == "bash"
        status, body = _http("POST", f"{base}/safety-1/approve", "wrong", b"{}")
        assert status == 401 and call.thread.is_alive()  # refused: still waiting

        status, body = _http("POST", f"{base}/safety-1/approve", "s3cret-token", b"{oops")
        assert status == 400 and "JSON" in body["error"]
        answer = json.dumps({"by": "carol", "note": "known script"}).encode()
        status, decided = _http("POST", f"{base}/safety-1/approve", "s3cret-token", answer)
        assert status == 200 and decided["status"] == "approved"
        assert (decided["decided_by"], decided["note"]) == ("carol", "known script")
        verdict = call.result()
        assert verdict.decision is Decision.ALLOW and verdict.approval == "approved"

        status, body = _http("POST", f"{base}/safety-1/deny", "s3cret-token", b"")
        assert status == 409 and "already approved by carol" in body["error"]
        status, body = _http("POST", f"{base}/safety-9/deny", "s3cret-token", b"")
        assert status == 404 and "no approval safety-9" in body["error"]
        status, one = _http("GET", f"{base}/safety-1", "s3cret-token")
        assert status == 200 and one["status"] == "approved"
        status, recent = _http("GET", f"{base}?recent=5", "s3cret-token")
        assert status == 200 and [a["id"] for a in recent] == ["safety-1"]
        status, withdrawn = _http("POST", f"{base}/safety-1/withdraw", "s3cret-token", b"")
        assert status == 200 and withdrawn["status"] == "withdrawn"
        assert withdrawn["note"].startswith("withdrawn: it was approved by carol at 20")
        status, body = _http("POST", f"{base}/safety-1/withdraw", "s3cret-token", b"")
        assert status == 409 and "only an approval or a denial" in body["error"]
        metrics = urllib.request.Request(
            f"{serve.http_url}/metrics", headers={"Authorization": "Bearer s3cret-token"}
        )
        with urllib.request.urlopen(metrics, timeout=10) as response:
            text = response.read().decode()
        assert 'approval_requests_total{outcome="200"}' in text
        assert 'approval_requests_total{outcome="409"} 2' in text
    assert serve.returncode == 0


def test_without_a_token_only_loopback_clients_answer_and_no_store_means_no_approvals(tmp_path):
    from otel_safety.config import Settings
    from otel_safety.sidecar import Sidecar, SidecarOptions
    from otel_safety.sidecar.http_server import _loopback

    settings = Settings.resolve(
        environ={}, db_path=str(tmp_path / "s.duckdb"), detectors=["tool_guard"], workers=0
    )
    with Sidecar(settings, SidecarOptions(grpc_port=None, http_port=0)) as sidecar:
        store = ApprovalStore(settings.db_path)
        pending = store.create(tool="bash", category="execute_shell", risk=60, summary="s")
        url = f"{sidecar.http_url}/approvals/{pending.id}/deny"
        status, decided = _http("POST", url, None, b'{"note": "no"}')
        assert status == 200 and decided["decided_by"] == "http 127.0.0.1"  # loopback: allowed
    # Other hosts get 403 without a token; only loopback addresses count as local.
    assert _loopback("127.0.0.1") and _loopback("::1") and _loopback("::ffff:127.0.0.1")
    assert not _loopback("10.1.2.3") and not _loopback("192.168.0.7")

    no_store = Settings.resolve(environ={}, store=False, detectors=["tool_guard"], workers=0)
    with Sidecar(no_store, SidecarOptions(grpc_port=None, http_port=0)) as sidecar:
        status, body = _http("GET", f"{sidecar.http_url}/approvals", None)
        assert status == 404 and "--db" in body["error"]


class _NotHttp(QuietHandler):
    """Answers a POST with bytes that are not HTTP at all."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.wfile.write(b"garbage not http\r\n\r\n")
        self.close_connection = True


def test_a_webhook_answering_in_no_http_at_all_is_counted_and_keeps_its_thread(tmp_path):
    with LoopbackServer(_NotHttp) as server:
        channel = ApprovalChannel(
            tmp_path / "app.duckdb", timeout=0.3, poll=0.1, webhook=server.endpoint
        )
        guard = Guard(Directory(), approvals=channel)
        for number in range(3):
            guard.check_tool_call(
                "bash", {"command": f"chmod 777 run{number}.sh"}, "alice", record=False, pace=False
            )
        wait_for(lambda: channel.stats().get("webhook_failed") == 6, what="six failed posts")
        assert channel.notifier is not None and channel.notifier._thread.is_alive()


@pytest.mark.parametrize(
    ("where", "message"),
    [
        (lambda tmp: tmp / "missing" / "app.duckdb", "does not exist"),
        (lambda tmp: tmp, "is a folder"),
        (
            lambda tmp: (tmp / "spans.json", (tmp / "spans.json").write_text("{}"))[0],
            "not a DuckDB",
        ),
    ],
)
def test_a_store_path_no_approval_can_be_kept_at_is_refused_when_the_guard_is_built(
    tmp_path, where, message
):
    """It used to be found only at the first call that needed a person."""
    with pytest.raises(StoreError, match=message):
        Guard(Directory(), approvals=where(tmp_path))


@pytest.mark.process
def test_an_answer_withdrawn_from_the_cli_is_asked_again_even_by_the_guard_that_reused_it(
    tmp_path, monkeypatch
):
    """Approved by mistake: `otel-safety withdraw` takes the answer back, and the next similar
    call, in the same guard that reused the answer a moment ago, waits for a person again
    once the guard's memory of the answer is due for a recheck of the store."""
    from otel_safety.guard import approval

    monkeypatch.setattr(approval, "CHANNEL_RECHECK", 0.3)
    path = tmp_path / "app.duckdb"
    guard = _guard(path, reuse_within=600, timeout=30)
    call = GuardCall(guard)
    (pending,) = _pending(path)
    ApprovalStore(path).decide(pending.id, True, by="bob", note="known deploy step")
    assert call.result().approval == "approved"
    reused = guard.check_tool_call("bash", WARNED, "alice", record=False, pace=False)
    assert (reused.approval, reused.approval_id) == ("approved", pending.id)

    withdrawn = run_command(
        "withdraw", pending.id, "--by", "carol", "--note", "too broad", "--db", str(path)
    )
    assert withdrawn.returncode == 0, withdrawn.stderr
    assert f"withdrew the answer to {pending.id} as carol" in withdrawn.stdout
    [stored] = [a for a in ApprovalStore(path).recent() if a.id == pending.id]
    assert stored.status == "withdrawn" and stored.decided_by == "carol"
    # The answer taken back is kept whole: who, when, and their note.
    assert stored.note.startswith("too broad; withdrawn: it was approved by bob at 20")
    assert stored.note.endswith(" UTC (their note: known deploy step)")

    time.sleep(0.4)  # past the recheck
    again = GuardCall(guard)
    (asked,) = _pending(path)  # a new question, not the withdrawn answer
    assert asked.id != pending.id
    ApprovalStore(path).decide(asked.id, False, by="carol")
    assert again.result().approval == "denied"

    twice = run_command("withdraw", pending.id, "--db", str(path))
    assert twice.returncode == 1 and "only an approval or a denial" in twice.stderr
