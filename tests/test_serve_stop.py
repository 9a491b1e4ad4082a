"""How `serve` stops: the drain's length is a setting, and a second signal does not wait.

A client stuck mid-body holds the drain: the server waits for requests in progress, each
until its body deadline (30 s), or until `--drain-seconds` runs out.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from sidecar_support import ServeProcess, wait_for

from otel_safety.commands.main import build_parser
from otel_safety.commands.serve import options_from_args


def _stuck_request(http_url: str) -> socket.socket:
    """A POST whose body never finishes: a request in progress until its body deadline."""
    where = urlsplit(http_url)
    stuck = socket.create_connection((where.hostname, where.port), timeout=60)
    stuck.sendall(
        b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
        b"Content-Length: 100000\r\n\r\n" + b"\0" * 10
    )
    return stuck


def _stopping(serve: ServeProcess) -> None:
    assert serve.process is not None
    serve.process.send_signal(signal.SIGTERM)
    wait_for(lambda: "stopping: draining" in serve.output, what="the drain to begin")
    time.sleep(0.3)  # the handler is back in the drain's wait


@pytest.mark.process
def test_a_second_stop_signal_exits_at_once_and_names_the_spool(tmp_path: Path):
    db = tmp_path / "agents.duckdb"
    with ServeProcess("--db", str(db), "--drain-seconds", "120", "--workers", "0") as serve:
        stuck = _stuck_request(serve.http_url)
        try:
            _stopping(serve)
            assert serve.process is not None
            began = time.monotonic()
            serve.process.send_signal(signal.SIGTERM)
            try:
                code = serve.process.wait(20)  # the stuck request alone would hold it 30 s
            except subprocess.TimeoutExpired:
                pytest.fail("a second SIGTERM did not end serve:\n" + serve.output)
            waited = time.monotonic() - began
        finally:
            stuck.close()
    assert code == 128 + signal.SIGTERM, serve.output
    wait_for(lambda: "second stop signal" in serve.output, what="the forced exit's line")
    assert f"stay in the spool {db}.spool " in serve.output
    assert waited < 20


@pytest.mark.process
def test_the_drain_gives_up_after_drain_seconds(tmp_path: Path):
    db = tmp_path / "agents.duckdb"
    with ServeProcess("--db", str(db), "--drain-seconds", "1", "--workers", "0") as serve:
        stuck = _stuck_request(serve.http_url)
        try:
            _stopping(serve)
            assert serve.process is not None
            code = serve.process.wait(20)  # 30 s if the stuck request were waited for
        finally:
            stuck.close()
    assert code == 0, serve.output
    assert "still running after 1s; stopping anyway" in serve.output


@pytest.mark.unit
@pytest.mark.parametrize(
    ("argv", "env", "expected"),
    [
        ([], {}, 30.0),
        (["--drain-seconds", "5"], {}, 5.0),
        ([], {"OTEL_SAFETY_SERVE_DRAIN_SECONDS": "7.5"}, 7.5),
    ],
)
def test_drain_seconds_from_the_flag_or_the_variable(monkeypatch, tmp_path, argv, env, expected):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    args = build_parser().parse_args(
        ["serve", "--db", str(tmp_path / "s.duckdb"), "--grpc-port", "0", "--http-port", "0", *argv]
    )
    _settings, options = options_from_args(args)
    assert options.drain_timeout == expected


@pytest.mark.unit
def test_a_negative_drain_is_refused(monkeypatch, tmp_path):
    monkeypatch.setenv("OTEL_SAFETY_SERVE_DRAIN_SECONDS", "-1")
    args = build_parser().parse_args(["serve", "--db", str(tmp_path / "s.duckdb")])
    with pytest.raises(Exception, match="OTEL_SAFETY_SERVE_DRAIN_SECONDS"):
        options_from_args(args)
