"""serve asks the OS whether it can listen before it loads anything (sidecar/ports.py)."""

from __future__ import annotations

import socket

import pytest

from otel_safety.cli import main
from otel_safety.sidecar.ports import check_host, ensure_free


@pytest.fixture
def held_port():
    """A loopback port something else listens on, released by the test."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]


def test_a_port_in_use_is_refused_naming_the_option_that_moves_it(held_port):
    with pytest.raises(OSError, match=f"OTLP/gRPC on 127.0.0.1:{held_port} .*--grpc-port"):
        ensure_free("127.0.0.1", held_port, "gRPC", "--grpc-port")
    ensure_free("127.0.0.1", 0, "HTTP", "--http-port")  # any free port: nothing to check
    ensure_free("127.0.0.1", None, "HTTP", "--http-port")  # off


def test_an_address_not_of_this_machine_is_a_host_problem():
    with pytest.raises(ValueError, match="--host"):
        check_host("256.1.1.1")
    check_host("127.0.0.1")


def test_serve_on_a_busy_port_says_so_before_loading_the_detectors(held_port, tmp_path, capsys):
    db = tmp_path / "s.duckdb"
    code = main(["serve", "--db", str(db), "--grpc-port", str(held_port), "--http-port", "0"])
    assert code == 1
    assert f"127.0.0.1:{held_port}" in capsys.readouterr().err
    assert not db.exists()  # refused before the store (or anything else) was opened
