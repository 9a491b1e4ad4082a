"""`otel-safety dashboard`: the live web page over a store; `serve --dashboard` shares it."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from otel_safety.commands.demo import DEMO_DB
from otel_safety.commands.options import add_db
from otel_safety.commands.stopping import StopSignals
from otel_safety.config import Settings, read_named_file
from otel_safety.extras import install_hint

LOOPBACK = ("127.0.0.1", "localhost", "::1")
DEFAULT_PORT = Settings.model_fields["dashboard_port"].default


def add_commands(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "dashboard",
        help="serve a live web dashboard over a store (needs otel-safety[dashboard])",
        description="A web page over the store, refreshed live: escalations over time, "
        "flagged traces with their evidence and span tree, the guard's decisions by requester "
        "and tool, behaviour indicators per agent, pending approvals to approve or deny, and "
        "halted conversations. It only reads the store, except to resolve alerts, answer "
        "approvals and halt or lift conversations. The same pages run inside `serve` with "
        "--dashboard.",
        epilog="With a token, open the printed address with ?token=<token> once; the browser "
        "then keeps a session cookie.",
    )
    add_db(parser)
    add_listen_options(parser, host=True)
    parser.set_defaults(handler=cmd_dashboard)


def add_listen_options(parser: Any, host: bool) -> None:
    """Where and how the dashboard listens; `serve` has its own --host and token, and names
    the rest --dashboard-refresh and --dashboard-reviewer."""
    if host:
        parser.add_argument(
            "--host",
            help="address to bind (default 127.0.0.1) [OTEL_SAFETY_DASHBOARD_HOST]",
        )
        parser.add_argument(
            "--port",
            type=int,
            help=f"port; 0 picks a free one (default {DEFAULT_PORT}) [OTEL_SAFETY_DASHBOARD_PORT]",
        )
        parser.add_argument(
            "--token-file",
            help="require this bearer token, as `serve` does [OTEL_SAFETY_SERVE_TOKEN_FILE; or "
            "the token itself in OTEL_SAFETY_SERVE_TOKEN]",
        )
    prefix = "" if host else "--dashboard-"
    parser.add_argument(
        f"{prefix or '--'}refresh",
        dest="refresh",
        type=float,
        default=5.0,
        help="seconds between the panels' live refreshes (default 5)",
    )
    parser.add_argument(
        f"{prefix or '--'}reviewer",
        dest="reviewer",
        default=None,
        help="the name actions are recorded under until changed on the page "
        "(default: the user running the command)",
    )


def dashboard_options(
    db: str,
    token: str | None,
    host: str,
    refresh: float,
    reviewer: str | None,
    beside_writer: bool = False,
):
    """Check what the dashboard needs before anything listens; errors say what to do."""
    try:
        import jinja2  # noqa: F401
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        raise ValueError(
            f"the dashboard needs the dashboard extra ({exc.name} is missing): "
            f"{install_hint('dashboard')}"
        ) from None
    from otel_safety.dashboard.app import DashboardOptions
    from otel_safety.resolutions.store import default_resolver

    if refresh < 0.5:
        raise ValueError(f"--refresh must be at least 0.5 seconds, got {refresh}")
    return DashboardOptions(
        db_path=db,
        token=token,
        refresh_seconds=refresh,
        loopback_only=host in LOOPBACK,
        actor=reviewer or default_resolver(),
        beside_writer=beside_writer,
    )


def read_token(settings: Settings) -> str | None:
    """The bearer token: from the settings' token file when one is named, else the token
    itself (OTEL_SAFETY_SERVE_TOKEN)."""
    token = settings.serve_token.get_secret_value().strip() if settings.serve_token else None
    token_file = settings.serve_token_file
    if token_file:
        named_by = "--token-file (OTEL_SAFETY_SERVE_TOKEN_FILE)"
        token = read_named_file(token_file, named_by).decode("utf-8").strip()
        if not token:
            raise ValueError(f"the token file {token_file} is empty")
    return token


def cmd_dashboard(args: argparse.Namespace) -> int:
    if not Path(args.db).is_file():
        raise ValueError(
            f"no store at {args.db}; make one with `serve` or `ingest`, or after `demo` "
            f"pass --db {DEMO_DB}"
        )
    settings = Settings.resolve(
        dashboard_host=args.host, dashboard_port=args.port, serve_token_file=args.token_file
    )
    host, port = settings.dashboard_host, settings.dashboard_port
    if not 0 <= port <= 65535:
        raise ValueError(f"--port is a number from 0 to 65535, got {port}")
    token = read_token(settings)
    options = dashboard_options(args.db, token, host, args.refresh, args.reviewer)
    from otel_safety.dashboard.server import DashboardServer

    server = DashboardServer(options, host=host, port=port)
    stop = StopSignals()
    server.start()
    print(f"otel-safety dashboard: {server.url}/ over {Path(args.db).resolve()}", flush=True)
    if token:
        print(
            "otel-safety dashboard: bearer token required; open it with ?token=<token>", flush=True
        )
    if host not in LOOPBACK:
        print(f"otel-safety dashboard: warning: listening on {host}, not only this machine",
              flush=True)  # fmt: skip
    print("otel-safety dashboard: ready; Ctrl-C stops", flush=True)
    stop.wait()
    server.stop()
    print("otel-safety dashboard: stopped", flush=True)
    return 0
