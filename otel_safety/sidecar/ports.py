"""Whether `serve` can listen where it was told to, asked of the OS before anything starts.

grpcio logs its own C-level error on a busy port before failing, which buries the message
that says what to do, and the listeners open only after the detectors load (seconds): a
probe bind answers at once, naming the option that fixes it.
"""

from __future__ import annotations

import socket

__all__ = ["check_host", "ensure_free"]


def check_host(host: str) -> None:
    """Refuse an address this machine cannot listen on (a typo, a name that does not
    resolve, another machine's address): binding port 0 tries the address alone, so the
    advice is about --host, not the ports."""
    try:
        _probe(host, 0)
    except OSError as exc:
        raise ValueError(
            f"cannot listen on {host} ({exc.strerror or exc}); give an address of this "
            "machine with --host (127.0.0.1 for this machine only, 0.0.0.0 for every "
            "interface) [OTEL_SAFETY_SERVE_HOST]"
        ) from None


def ensure_free(host: str, port: int | None, protocol: str, option: str) -> None:
    """Refuse a port something else listens on; 0 (any free port) and None (off) pass."""
    if not port:
        return
    try:
        _probe(host, port)
    except OSError as exc:
        raise OSError(
            f"cannot listen for OTLP/{protocol} on {_bracket(host)}:{port} "
            f"({exc.strerror or exc}); stop what holds the port or pick another with {option}"
        ) from None


def _probe(host: str, port: int) -> None:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET  # as the listeners choose
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the listeners bind
        probe.bind((host.strip("[]"), port))


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host
