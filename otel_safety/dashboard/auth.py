"""The same bearer token as `serve`, usable from a browser.

A client may send `Authorization: Bearer <token>` on every request, as to `serve`. A browser
opens `/?token=<token>` once: the dashboard answers with an HttpOnly, SameSite=Strict cookie
holding a digest of the token (never the token) and sends it on to the page without the
token in the address bar. Without a token configured, everything is open (the default
binding is 127.0.0.1).
"""

from __future__ import annotations

import hashlib
import hmac
from http.cookies import SimpleCookie
from urllib.parse import parse_qsl, urlencode

from starlette.types import ASGIApp, Receive, Scope, Send

COOKIE = "otel_safety_dashboard"


def session_value(token: str) -> str:
    return hmac.new(token.encode(), b"otel-safety dashboard session", hashlib.sha256).hexdigest()


class TokenAuth:
    """ASGI middleware: 401 unless the bearer header or the session cookie matches."""

    def __init__(self, app: ASGIApp, token: str | None) -> None:
        self.app = app
        self.token = token
        self.session = session_value(token) if token else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.token is None:
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        if self._bearer_ok(headers.get("authorization", "")) or self._cookie_ok(
            headers.get("cookie", "")
        ):
            await self.app(scope, receive, send)
            return
        query = parse_qsl(scope.get("query_string", b"").decode("latin-1"))
        given = dict(query).get("token")
        if scope["method"] == "GET" and given is not None and self._equal(given, self.token):
            rest = urlencode([(k, v) for k, v in query if k != "token"])
            await _send(
                send,
                303,
                b"",
                [
                    (b"location", (scope["path"] + (f"?{rest}" if rest else "")).encode()),
                    (
                        b"set-cookie",
                        f"{COOKIE}={self.session}; HttpOnly; SameSite=Strict; Path=/".encode(),
                    ),
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

    def _cookie_ok(self, header: str) -> bool:
        if not header:
            return False
        jar: SimpleCookie = SimpleCookie()
        try:
            jar.load(header)
        except Exception:  # a malformed cookie header is simply no session
            return False
        morsel = jar.get(COOKIE)
        return morsel is not None and self._equal(morsel.value, self.session or "")

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
