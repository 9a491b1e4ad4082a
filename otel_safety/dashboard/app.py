"""The dashboard as a Starlette app: server-rendered pages, htmx fragments refreshed live.

Read-only on the store except three actions: resolving a trace's alerts, deciding a pending
approval, and halting or lifting a conversation. All are POSTs that need htmx's `HX-Request`
header and a same-origin `Origin`, so another site open in the browser cannot make them (a
cross-site form cannot set the header).
"""

from __future__ import annotations

import asyncio
import functools
import re
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from otel_safety import __version__
from otel_safety.approvals.halts import StoredHalt
from otel_safety.dashboard import approvals, data, halts
from otel_safety.dashboard.auth import TokenAuth
from otel_safety.dashboard.shared_reads import SharedReads
from otel_safety.exporters.duckdb import StoreError
from otel_safety.report.page import STYLE as REPORT_STYLE
from otel_safety.report.svg import LEVEL_COLOURS
from otel_safety.resolutions.store import ResolutionError, resolve
from otel_safety.result_tables import page_safe

TRACE_ID = re.compile(r"^[0-9a-f]{32}$")
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; "
    "base-uri 'none'"
)
LOOPBACK_NAMES = ["127.0.0.1", "localhost", "::1", "[::1]"]
# A form's largest body: a 4,000-character note in any script, percent-encoded (up to 12
# bytes a character), and the other fields.
MAX_FORM = 64 * 1024
TOO_LARGE = f"not recorded: the form is larger than {MAX_FORM // 1024} KiB; shorten the note"


@dataclass(frozen=True)
class DashboardOptions:
    db_path: str
    token: str | None = None
    refresh_seconds: float = 5.0
    loopback_only: bool = True  # bound to 127.0.0.1: refuse other Host names (DNS rebinding)
    actor: str = "reviewer"  # the name in the "acting as" field until the user changes it
    beside_writer: bool = False  # in `serve`'s process, which writes the store


def create_app(options: DashboardOptions) -> Starlette:
    pages = _Pages(options)
    routes = [
        Route("/", pages.index),
        Route("/static/dashboard.css", stylesheet),
        Route("/panel/escalations", pages.escalations),
        Route("/panel/flagged", pages.flagged),
        Route("/panel/audit", pages.audit),
        Route("/panel/behaviour", pages.behaviour),
        Route("/panel/approvals", pages.approvals),
        Route("/panel/halts", pages.halts),
        Route("/trace/{trace_id}", pages.trace),
        Route("/trace/{trace_id}/resolve", pages.resolve, methods=["POST"]),
        Route("/approvals/{approval_id}/{decision}", pages.decide, methods=["POST"]),
        Route("/halts/{action}", pages.halt, methods=["POST"]),
        Mount(
            "/static",
            app=StaticFiles(directory=Path(__file__).parent / "static"),
            name="static",
        ),
    ]
    middleware = []
    if options.loopback_only:
        middleware.append(Middleware(TrustedHostMiddleware, allowed_hosts=LOOPBACK_NAMES))
    middleware.append(Middleware(TokenAuth, token=options.token))
    return Starlette(routes=routes, middleware=middleware)


@functools.cache
def _templates() -> Environment:
    env = Environment(
        loader=PackageLoader("otel_safety.dashboard", "templates"),
        autoescape=select_autoescape(["html"]),
        trim_blocks=True,
        lstrip_blocks=True,
        finalize=_shown,
    )
    env.globals.update(level_colours=LEVEL_COLOURS, version=__version__)
    env.filters["when"] = _when
    return env


def _shown(value: Any) -> Any:
    """Every value a page prints: text with its bidirectional controls written as escapes,
    so what an agent wrote cannot reorder the page around it (markup the pages build
    themselves is left as it is)."""
    if isinstance(value, str) and not isinstance(value, Markup):
        return page_safe(value)
    return value


def _when(value: Any) -> str:
    """A moment as UTC to the second, whether the store gave it with a zone or without."""
    if value is None:
        return ""
    if isinstance(value, datetime):
        if value.tzinfo is not None:
            value = value.astimezone(UTC).replace(tzinfo=None)
        return value.isoformat(sep=" ", timespec="seconds")
    return str(value)


def _html(name: str, status: int = 200, **context: Any) -> HTMLResponse:
    body = _templates().get_template(name).render(**context)
    response = HTMLResponse(body, status_code=status)
    response.headers["Content-Security-Policy"] = CSP
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Referrer-Policy"] = "no-referrer"
    response.headers["Cache-Control"] = "no-store"
    return response


class _Pages:
    """The handlers; each store read runs in a worker thread (DuckDB blocks)."""

    def __init__(self, options: DashboardOptions) -> None:
        self.options = options
        self.db = options.db_path
        self.approvals_db = options.db_path  # approvals live in the store file

        # One store operation at a time in this process: a read-only connection and a
        # read-write one (an action) may not be open on one file in the same process.
        self._lock = threading.Lock()
        # Tabs refreshing at once share a read; an answer is at most half a refresh old.
        self._shared = SharedReads(fresh_for=options.refresh_seconds / 2)

    async def _run(self, work: Any, *args: Any, **kwargs: Any) -> Any:
        def locked() -> Any:
            with self._lock:
                return work(*args, **kwargs)

        return await asyncio.to_thread(locked)

    async def _act(self, work: Any, *args: Any, **kwargs: Any) -> Any:
        """An action on the store; every read after it reads the store anew."""
        try:
            return await self._run(work, *args, **kwargs)
        finally:
            self._shared.forget()

    async def _read(self, key: tuple[Any, ...], work: Any) -> Any:
        """`work` on the store, or the answer of the same read (`key`) another tab asked for."""
        return await self._shared.get(
            key,
            lambda: self._run(data.read, self.db, work, beside_writer=self.options.beside_writer),
        )

    def _page(self, name: str, status: int = 200, **context: Any) -> HTMLResponse:
        """A whole page: the header shows the store, the refresh and who is acting."""
        return _html(
            name,
            status,
            db=self.db,
            refresh=self.options.refresh_seconds,
            actor=self.options.actor,
            **context,
        )

    async def index(self, request: Request) -> Response:
        try:
            choices = await self._read(("choices",), data.audit_choices)
        except data.StoreBusy:  # the filters offer "all" only; the panels still refresh
            choices = {"requesters": [], "tools": []}
        return self._page("index.html", flagged_limits=data.FLAGGED_LIMITS, **choices)

    async def escalations(self, request: Request) -> Response:
        try:
            view = await self._read(("escalations",), data.escalations)
        except data.StoreBusy as exc:
            return _busy(exc)
        return _html("escalations.html", view=view)

    async def flagged(self, request: Request) -> Response:
        include = request.query_params.get("resolved") in ("1", "true", "on")
        asked = request.query_params.get("limit") or str(data.FLAGGED_LIMITS[0])
        offered = {str(n): n for n in data.FLAGGED_LIMITS}
        if asked not in offered:  # as the audit panel's verdict: a bad link is told, not guessed
            told = ", ".join(offered)
            return _html("message.html", 400, message=f"limit must be one of {told}")
        limit = offered[asked]
        try:
            found = await self._read(
                ("flagged", include, limit), lambda con: data.flagged_traces(con, include, limit)
            )
        except data.StoreBusy as exc:
            return _busy(exc)
        return _html("flagged.html", rows=found, include_resolved=include, shown=limit)

    async def audit(self, request: Request) -> Response:
        params = request.query_params
        requester = params.get("requester") or None
        tool = params.get("tool") or None
        verdict = params.get("verdict") or None
        if verdict not in (None, "ALLOW", "WARN", "BLOCK"):
            return _html("message.html", 400, message="verdict must be ALLOW, WARN or BLOCK")
        try:
            log = await self._read(
                ("audit", requester, tool, verdict),
                lambda con: data.audit_log(con, requester, tool, verdict),
            )
        except data.StoreBusy as exc:
            return _busy(exc)
        return _html("audit.html", log=log, requester=requester, tool=tool, verdict=verdict)

    async def behaviour(self, request: Request) -> Response:
        try:
            found = await self._read(("behaviour",), data.behaviour)
        except data.StoreBusy as exc:
            return _busy(exc)
        return _html("behaviour.html", rows=found)

    async def approvals(self, request: Request, message: str | None = None) -> Response:
        try:
            waiting, decided = await self._shared.get(
                ("approvals",), lambda: self._run(approvals.panel, self.approvals_db)
            )
        except StoreError as exc:  # locked for long, or no store yet: the next refresh retries
            return _busy(exc)
        return _html("approvals.html", pending=waiting, recent=decided, message=message)

    async def halts(self, request: Request, message: str | None = None) -> Response:
        try:
            halted, history = await self._shared.get(
                ("halts",), lambda: self._run(halts.panel, self.db)
            )
        except StoreError as exc:  # locked for long, or no store yet: the next refresh retries
            return _busy(exc)
        return _html("halts.html", halted=halted, history=history, message=message)

    async def halt(self, request: Request) -> Response:
        refused = _refuse_cross_site(request)
        if refused is not None:
            return refused
        action = request.path_params["action"]
        if action not in ("halt", "lift"):
            return _html("message.html", 404, message="halt or lift")
        form = await _form(request)
        message = None
        done: StoredHalt | None = None
        try:
            if form is None:
                raise ValueError(TOO_LARGE)
            by = form.get("by", "").strip()
            if not by:
                raise ValueError("say who decides: fill in 'acting as'")
            done = await self._act(
                halts.decide,
                self.db,
                form.get("conversation", ""),
                action == "halt",
                by,
                form.get("reason") or None,
            )
        except ValueError as exc:  # not halted, no id, no reason
            message = str(exc)
        except StoreError as exc:
            message = f"not recorded, try again: {exc}"
        if form is None or form.get("reply") != "line":  # the panel's form: the panel again
            return await self.halts(request, message=message)
        if done is None:  # the trace page's form: one line
            return _html("message.html", message=message)
        done_line = (
            f"{'halted' if done.halted else 'lifted the halt of'} conversation "
            f"{done.conversation} as {done.decided_by}: guards following this store act on it "
            "within about a second (Halted conversations, on the first page)"
        )
        return _html("message.html", message=done_line, kind="key")

    async def trace(self, request: Request) -> Response:
        trace_id = request.path_params["trace_id"].lower()
        if not TRACE_ID.match(trace_id):
            return _html("message.html", 404, message="a trace id is 32 hex digits")
        try:
            detail = await self._read(
                ("trace", trace_id), lambda con: data.trace_detail(con, trace_id)
            )
        except data.StoreBusy as exc:
            return _busy(exc)
        if detail.trace is None and not detail.tree and not detail.findings:
            return _html("message.html", 404, message=f"no trace {trace_id} in the store")
        return self._page("trace.html", detail=detail)

    async def resolve(self, request: Request) -> Response:
        refused = _refuse_cross_site(request)
        if refused is not None:
            return refused
        trace_id = request.path_params["trace_id"].lower()
        form = await _form(request)
        message = None
        try:
            if form is None:
                raise ResolutionError(TOO_LARGE)
            if not form.get("by", "").strip():
                raise ResolutionError("say who resolves it: fill in 'acting as'")
            action = form.get("action", "resolve")
            if action not in ("resolve", "reopen"):
                raise ResolutionError(f"unknown action {action!r}: resolve or reopen")
            await self._act(
                resolve,
                self.db,
                trace_id,
                by=form.get("by", ""),
                note=form.get("note") or None,
                detector=form.get("detector") or None,
                resolved=action == "resolve",
            )
        except ResolutionError as exc:  # shown above the form, which stays
            message = str(exc)
        except StoreError as exc:
            message = f"not recorded, try again: {exc}"
        try:
            detail = await self._read(
                ("trace", trace_id), lambda con: data.trace_detail(con, trace_id)
            )
        except data.StoreBusy as exc:
            return _html("message.html", message=message or f"recorded; {exc}")
        return _html("trace_resolution.html", detail=detail, message=message)

    async def decide(self, request: Request) -> Response:
        refused = _refuse_cross_site(request)
        if refused is not None:
            return refused
        decision = request.path_params["decision"]
        if decision not in ("approve", "deny", "withdraw"):
            return _html("message.html", 404, message="approve, deny or withdraw")
        form = await _form(request)
        if form is None:
            return await self.approvals(request, message=TOO_LARGE)
        by = form.get("by", "").strip()
        if not by:
            return await self.approvals(request, message="say who decides: fill in 'acting as'")
        approval_id, note = request.path_params["approval_id"], form.get("note") or None
        try:
            if decision == "withdraw":
                await self._act(approvals.withdraw, self.approvals_db, approval_id, by, note)
            else:
                await self._act(
                    approvals.decide,
                    self.approvals_db,
                    approval_id,
                    decision == "approve",
                    by,
                    note,
                )
        except approvals.ApprovalError as exc:  # decided elsewhere, expired, unknown
            return await self.approvals(request, message=str(exc))
        except StoreError as exc:
            return await self.approvals(request, message=f"not recorded, try again: {exc}")
        return await self.approvals(request)


# The report's look, plus what only a live page has: navigation, forms, buttons.
DASHBOARD_STYLE = """
section h2:first-child{margin-top:2px}
.problem{background:#fee2e2;border:1px solid #b91c1c;color:#7f1d1d;padding:8px 12px;margin:8px 0}
header.top{display:flex;flex-wrap:wrap;align-items:baseline;gap:6px 18px}
header.top h1 a{color:inherit;text-decoration:none}.actor{margin-left:auto}
nav{margin-top:10px;display:flex;gap:14px}nav a{color:#1d4ed8}
.filters{display:flex;gap:16px;flex-wrap:wrap;margin:4px 0 10px}
.columns{display:grid;grid-template-columns:1fr 1fr;gap:18px}
td.blocked{color:#b91c1c;font-weight:700}
.verdict{font-weight:600;font-size:12px;padding:0 6px;border-radius:4px}
.verdict-BLOCK{background:#fee2e2;color:#991b1b}.verdict-WARN{background:#fef3c7;color:#92400e}
.verdict-ALLOW{background:#dcfce7;color:#166534}
.status{font-weight:600;font-size:12px;padding:1px 8px;border-radius:10px;color:#fff}
.status-pending{background:#b45309}.status-approved{background:#15803d}
.status-denied{background:#b91c1c}.status-expired,.status-withdrawn{background:#6b7280}
button{font:inherit;font-weight:600;border:0;border-radius:6px;padding:4px 12px;cursor:pointer;
color:#fff}button.approve{background:#15803d}button.deny{background:#b91c1c}
button.withdraw{background:#4b5563}
#pending-table td.actions{white-space:normal}#pending-table button{margin:2px 0}
.approval-note{width:100%;box-sizing:border-box;margin-top:2px;font:inherit}
td.actions,td.nowrap,#flagged-table td:nth-child(2),#audit-table td:first-child{white-space:nowrap}
tr.resolved{color:#6b7280}
blockquote.evidence{margin:6px 0;padding:6px 10px;background:#fef2f2;border-left:3px solid
#ef4444;overflow-wrap:anywhere;white-space:pre-wrap}
.finding{border-top:1px solid #e5e7eb;padding:6px 0}.finding h3{margin:6px 0;font-size:15px}
tr.flagged{background:#fff7ed}.branch{color:#9ca3af}
#resolve-form{display:flex;gap:12px;align-items:flex-end;flex-wrap:wrap;margin:8px 0}
#resolve-form textarea{width:360px;display:block}
.strength{display:inline-block;height:8px;width:60px;margin-right:6px;border-radius:4px;
background:linear-gradient(90deg,#ef4444 var(--s),#e5e7eb var(--s))}
"""


def stylesheet(request: Request) -> Response:
    return Response(
        REPORT_STYLE + DASHBOARD_STYLE,
        media_type="text/css",
        headers={"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"},
    )


def _busy(exc: Exception) -> Response:
    """A locked store: 503, so htmx keeps what the panel showed and the next refresh tries
    again. A store gone or unreadable: said in the panel (htmx shows no 503), as the numbers
    it showed before are no longer true."""
    if getattr(exc, "lasting", False):
        return _html("message.html", message=f"the store cannot be read: {exc}")
    return _html("message.html", 503, message=f"the store is busy, retrying: {exc}")


def _refuse_cross_site(request: Request) -> Response | None:
    if request.headers.get("HX-Request") != "true":
        return _html("message.html", 403, message="actions are taken from the dashboard page")
    origin = request.headers.get("Origin")
    if origin is not None and urlsplit(origin).netloc != request.headers.get("Host"):
        return _html("message.html", 403, message="cross-site request refused")
    return None


async def _form(request: Request) -> dict[str, str] | None:
    """A urlencoded form (htmx's default), read without a multipart parser; None when it is
    larger than any form of these pages can be."""
    declared = request.headers.get("content-length", "")
    if declared.isascii() and declared.isdecimal() and int(declared) > MAX_FORM:
        return None  # refused unread
    body = b""
    async for chunk in request.stream():  # read no further than a form can be
        body += chunk
        if len(body) > MAX_FORM:
            return None
    parsed = parse_qs(body.decode("utf-8", errors="replace"), keep_blank_values=True)
    return {key: values[-1] for key, values in parsed.items()}
