"""The same bearer token as `serve`, usable from a browser.

A client may send `Authorization: Bearer <token>` on every request, as to `serve`. A browser
opens `/?token=<token>` once: the dashboard answers with an HttpOnly, SameSite=Strict cookie
holding a session (never the token) and sends it on to the page without the token in the
address bar. A session is signed with a secret drawn when the dashboard starts and lasts
SESSION_SECONDS: cookies do not keep to a port, so another web app on the same host may be
sent it, and what it gets must neither outlive a restart nor last for good. Without a token
configured, everything is open (the default binding is 127.0.0.1).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from http.cookies import SimpleCookie
from urllib.parse import parse_qsl, urlencode

from starlette.types import ASGIApp, Receive, Scope, Send

COOKIE = "otel_safety_dashboard"  # and the port: two dashboards on one host keep their own
SESSION_SECONDS = 12 * 3600


def session_value(secret: bytes, issued: int) -> str:
    """`<issued>.<signature>`: when the session began, signed with this run's secret."""
    signature = hmac.new(secret, str(issued).encode(), hashlib.sha256).hexdigest()
    return f"{issued}.{signature}"


def cookie_name(scope: Scope) -> str:
    """The session cookie of the dashboard on this port: a browser sends every port's cookies
    to a host, so one shared name let signing in to a second dashboard end the first's
    session."""
    server = scope.get("server") or (None, None)
    return f"{COOKIE}_{server[1]}" if server[1] else COOKIE


class TokenAuth:
    """ASGI middleware: 401 unless the bearer header or the session cookie matches."""

    def __init__(self, app: ASGIApp, token: str | None) -> None:
        self.app = app
        self.token = token
        self._secret = secrets.token_bytes(32)  # a restart ends every session

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.token is None:
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        if self._bearer_ok(headers.get("authorization", "")) or self._cookie_ok(
            headers.get("cookie", ""), cookie_name(scope)
        ):
            await self.app(scope, receive, send)
            return
        query = parse_qsl(scope.get("query_string", b"").decode("latin-1"))
        given = dict(query).get("token")
        if scope["method"] == "GET" and given is not None and self._equal(given, self.token):
            rest = urlencode([(k, v) for k, v in query if k != "token"])
            # Only a path of this dashboard: `//host/x` or `/\host` would send the browser
            # to another site once logged in.
            path = scope["path"] if not scope["path"].startswith(("//", "/\\")) else "/"
            session = session_value(self._secret, int(time.time()))
            cookie = (
                f"{cookie_name(scope)}={session}; HttpOnly; SameSite=Strict; Path=/; "
                f"Max-Age={SESSION_SECONDS}"
            )
            await _send(
                send,
                303,
                b"",
                [
                    (b"location", (path + (f"?{rest}" if rest else "")).encode("latin-1")),
                    (b"set-cookie", cookie.encode()),
                ],
            )
            return
        await _send(
            send,
            401,
            b"otel-safety dashboard: a bearer token is required. Open the address with "
            b"?token=<token> once (the token of serve's --token-file or "
            b"OTEL_SAFETY_SERVE_TOKEN), or send 'Authorization: Bearer <token>'.\n",
            [(b"content-type", b"text/plain; charset=utf-8"), (b"www-authenticate", b"Bearer")],
        )

    def _bearer_ok(self, header: str) -> bool:
        return self._equal(header, f"Bearer {self.token}")

    def _cookie_ok(self, header: str, name: str) -> bool:
        if not header:
            return False
        jar: SimpleCookie = SimpleCookie()
        try:
            jar.load(header)
        except Exception:  # a malformed cookie header is simply no session
            return False
        morsel = jar.get(name)
        if morsel is None:
            return False
        issued, _, _ = morsel.value.partition(".")
        if not issued.isascii() or not issued.isdecimal():
            return False
        fresh = 0 <= time.time() - int(issued) <= SESSION_SECONDS
        return fresh and self._equal(morsel.value, session_value(self._secret, int(issued)))

    @staticmethod
    def _equal(a: str, b: str) -> bool:
        return hmac.compare_digest(a.encode(), b.encode())


async def _send(send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [*headers, (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})
