"""`otel-safety serve` as users run it: a process, real exporters, a real collector in front.

The README's sidecar steps, automated: start `serve`, point an instrumented app (directly or
through the `rotel` OTLP collector) at it, stop it with SIGTERM, and read the store.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import duckdb
import httpx
import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from sidecar_support import (
    ROOT,
    GrpcNextHop,
    ServeProcess,
    rotel_collector,
    run_agent,
    wait_for,
)

from otel_safety import semconv as sc

pytestmark = pytest.mark.process  # every test here runs `serve` as a process


def flagged(db: str) -> list[tuple]:
    with duckdb.connect(db, read_only=True) as con:
        return con.execute(
            "SELECT s.service_name, f.detector, f.escalation_level FROM findings f "
            "JOIN spans s USING (trace_id, span_id) WHERE f.detected ORDER BY 1, 2"
        ).fetchall()


def test_serve_process_judges_stores_forwards_and_drains_on_sigterm(tmp_path):
    db = str(tmp_path / "agents.duckdb")
    with GrpcNextHop() as hop, ServeProcess("--db", db, "--forward", hop.endpoint) as serve:
        assert httpx.get(f"{serve.http_url}/health").json()["status"] == "ok"
        run_agent(GrpcExporter(endpoint=f"http://{serve.grpc_target}", insecure=True), "via-grpc")
        run_agent(HttpExporter(endpoint=f"{serve.http_url}/v1/traces"), "via-http")
        assert serve.stop() == 0, serve.output
    assert "stopped (spans received" in serve.output
    for kind in ("spool", "forward"):  # nothing owed at a clean stop: no folder left behind
        assert not Path(f"{db}.{kind}").exists(), kind
    assert flagged(db) == [
        ("via-grpc", "scope_escalation", "HARD_STOP"),
        ("via-http", "scope_escalation", "HARD_STOP"),
    ]
    levels = {
        span.resource.attributes["service.name"]: span.attributes.get(
            sc.OTEL_SAFETY_TRACE_ESCALATION_LEVEL
        )
        for span in hop.spans()
        if span.parent is None
    }
    assert levels == {"via-grpc": "HARD_STOP", "via-http": "HARD_STOP"}


def test_a_next_hop_that_is_down_does_not_hold_the_stop_past_the_drain(tmp_path):
    """`--drain-seconds` bounds the whole stop (an orchestrator kills what outlives its grace
    period): with the hop down, the stop took the drain, then 5 s, then the export in flight,
    about 40 s with the default 30. What the hop did not take stays on disk for later."""
    import time

    db = str(tmp_path / "agents.duckdb")
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        down = f"http://127.0.0.1:{probe.getsockname()[1]}"
    forward = ("--forward", down, "--forward-protocol", "http/protobuf")
    with ServeProcess("--db", db, "--drain-seconds", "3", *forward) as serve:
        run_agent(HttpExporter(endpoint=f"{serve.http_url}/v1/traces"), "hop-down")
        wait_for(
            lambda: httpx.get(f"{serve.http_url}/health").json()["forward_spool_records"] > 0,
            timeout=60,
            what="the run judged and queued for the hop",
        )
        started = time.monotonic()
        assert serve.stop(timeout=60) == 0, serve.output
        took = time.monotonic() - started
    assert took < 3 + 4, f"the stop took {took:.1f}s with --drain-seconds 3:\n{serve.output}"
    assert list(Path(f"{db}.forward").glob("*.spool"))  # kept for the hop
    assert flagged(db) == [("hop-down", "scope_escalation", "HARD_STOP")]


def test_serve_says_how_it_reaches_the_next_hop_and_where_its_own_metrics_go(tmp_path):
    """A bare host:port is TLS to the gRPC exporter, and a general OTLP endpoint receives
    serve's own metrics: both were silent, so a plaintext hop failed its handshakes and a
    wrong endpoint logged 404s with nothing on the banner to say why."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "guard.toml").write_text("version = 1\n")
    principals = tmp_path / "principals.json"
    principals.write_text('{"version": 1, "principals": []}')
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9",
        "OTEL_SAFETY_DATA_DIR": str(data),  # and the user's data and principals, now said
        "OTEL_SAFETY_PRINCIPALS": str(principals),
    }
    db = str(tmp_path / "agents.duckdb")
    forward = ("--forward", "127.0.0.1:9", "--drain-seconds", "1")
    with ServeProcess("--db", db, *forward, env=env) as serve:
        banner = serve.output
        assert serve.stop() == 0, serve.output
    assert "forwarding to 127.0.0.1:9 (grpc, TLS: no scheme given; http:// for plaintext)" in (
        banner
    )
    assert "own metrics also exported over OTLP to http://127.0.0.1:9" in banner
    assert f"data folder: {data} (guard.toml)" in banner
    assert f"principals file: {principals}" in banner
    assert f"spool: {db}.spool (each request on disk before it is acknowledged" in banner


def test_app_to_rotel_collector_to_serve(tmp_path):
    db = str(tmp_path / "agents.duckdb")
    with ServeProcess("--db", db, "--decision-wait", "2") as serve:
        with rotel_collector(f"http://{serve.grpc_target}") as (rotel_grpc, rotel_http):
            run_agent(
                GrpcExporter(endpoint=f"http://{rotel_grpc}", insecure=True), "through-rotel-grpc"
            )
            run_agent(HttpExporter(endpoint=f"{rotel_http}/v1/traces"), "through-rotel-http")
            wait_for(
                lambda: httpx.get(f"{serve.http_url}/health").json()["traces_evaluated"] >= 2,
                timeout=30,
                what="rotel to deliver both traces",
            )
        assert serve.stop() == 0, serve.output
    assert flagged(db) == [
        ("through-rotel-grpc", "scope_escalation", "HARD_STOP"),
        ("through-rotel-http", "scope_escalation", "HARD_STOP"),
    ]


def test_serve_refuses_to_start_on_a_port_in_use(tmp_path):
    with ServeProcess("--db", str(tmp_path / "a.duckdb"), "--http-port", "off") as first:
        port = first.grpc_target.rsplit(":", 1)[1]
        second = ServeProcess("--db", str(tmp_path / "b.duckdb"), "--http-port", "off")
        second.args[1] = port  # the same gRPC port
        try:
            with second:
                raise AssertionError("a second receiver bound a port already in use")
        except AssertionError as exc:
            assert "exited early" in str(exc) and "cannot listen" in str(exc)
            assert "--grpc-port" in str(exc)  # says what to do
            assert "Failed to add port" not in str(exc)  # no grpcio C-level noise first


def test_a_second_serve_on_the_same_store_is_told_so(tmp_path):
    db = str(tmp_path / "shared.duckdb")
    with ServeProcess("--db", db) as first, ServeProcess("--db", db) as second:
        assert "warning" not in first.output
        pid = str(first.process.pid)
        assert f"another serve (pid {pid}) already writes {db}" in second.output
        assert "--lake" in second.output
    with ServeProcess("--db", db) as third:  # both stopped: the claim was released
        assert "another serve" not in third.output


def test_serve_says_which_policy_and_monitor_modes_are_in_force(tmp_path):
    policy = ROOT / "examples" / "policies" / "escalation.cedar"
    env = {"OTEL_SAFETY_MONITOR_MODES": "sandbagging=active", "OTEL_SAFETY_POLICY": str(policy)}
    with ServeProcess("--db", str(tmp_path / "s.duckdb"), env=env) as serve:
        assert f"escalation policy: Cedar {policy}" in serve.output
        assert "sandbagging active" in serve.output and "behavior_drift passive" in serve.output


def test_serve_that_cannot_start_leaves_no_empty_store(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "sandbagging.toml").write_text('version = 1\n[monitor]\nmode = "loud"\n')
    db = tmp_path / "never.duckdb"
    failing = ServeProcess("--db", str(db), env={"OTEL_SAFETY_DATA_DIR": str(data)})
    with pytest.raises(AssertionError, match=r"sandbagging monitor \(.*\): mode"), failing:
        pass
    assert not db.exists()


def test_serve_stops_with_one_summary_and_removes_its_lock(tmp_path):
    db = tmp_path / "once.duckdb"
    with ServeProcess("--db", str(db)) as serve:
        assert Path(f"{db}.serve.lock").exists()  # held while serving
        assert serve.stop() == 0, serve.output
    assert serve.output.count("spans received") == 1, serve.output
    assert not Path(f"{db}.serve.lock").exists()
    assert db.exists()  # the store it wrote stays


def test_serve_on_an_address_not_of_this_machine_points_at_host_not_the_ports(tmp_path):
    db = tmp_path / "never.duckdb"
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    for host in ("256.1.1.1", "192.0.2.1"):  # no address at all; another machine's
        done = subprocess.run(
            [sys.executable, "-m", "otel_safety.cli", "serve", "--host", host, "--db", str(db)],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        )
        assert done.returncode == 1
        assert f"cannot listen on {host}" in done.stderr and "with --host" in done.stderr
        assert "-port" not in done.stderr, done.stderr
    assert not db.exists()


def test_serve_on_a_port_in_use_leaves_no_store_lock_or_spool(tmp_path):
    db = tmp_path / "never.duckdb"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        failing = ServeProcess("--db", str(db), "--grpc-port", "off", "--http-port", port)
        with pytest.raises(AssertionError, match="exited early") as raised, failing:
            pass
    assert failing.returncode == 1
    assert f"cannot listen for OTLP/HTTP on 127.0.0.1:{port}" in str(raised.value)
    assert "--http-port" in str(raised.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--grpc-port", "abc"), "a port is a number from 0 to 65535"),
        (("--http-port", "70000"), "a port is a number from 0 to 65535"),
        (("--forward", "notaurl"), "'notaurl' is not an OTLP endpoint; give one like http://"),
        (("--forward", "ftp://collector:4317"), "is not an OTLP endpoint"),
        (
            ("--forward", "collector:4318", "--forward-protocol", "http/protobuf"),
            "is not an OTLP endpoint",
        ),
        (("--token-file", "/nonexistent/token"), "--token-file (OTEL_SAFETY_SERVE_TOKEN_FILE)"),
        # checked before the store is claimed: no lock file is left behind
        (("--dashboard", "--dashboard-refresh", "0.1"), "--refresh must be at least 0.5 seconds"),
        (
            ("--tls-cert", "/nonexistent/c.pem", "--tls-key", "/nonexistent/k.pem"),
            "--tls-key /nonexistent/k.pem: cannot read it: No such file or directory",
        ),
    ],
)
def test_serve_rejects_bad_ports_and_endpoints_before_touching_the_store(tmp_path, args, says):
    db = tmp_path / "never.duckdb"
    done = subprocess.run(
        [sys.executable, "-m", "otel_safety.cli", "serve", "--db", str(db), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert says in done.stderr, done.stderr
    assert "invalid _port value" not in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_sigterm_while_serve_is_still_starting_stops_it_in_order(tmp_path):
    db = tmp_path / "early.duckdb"
    lock = Path(f"{db}.serve.lock")
    process = subprocess.Popen(
        [sys.executable, "-m", "otel_safety.cli", "serve", "--db", str(db),
         "--grpc-port", "0", "--http-port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        # The claim comes just before the detectors load, which takes a while.
        wait_for(lock.exists, timeout=60, what="serve to claim the store")
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, output
    assert output.count("stopped (spans received 0") == 1, output
    assert not lock.exists()
