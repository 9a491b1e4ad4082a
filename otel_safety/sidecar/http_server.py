"""OTLP/HTTP: `POST /v1/traces` and `POST /v1/logs` (protobuf or JSON, optionally gzip),
`GET /health`, `GET /metrics`.

Built on the standard library's `ThreadingHTTPServer` so the base install gains no web stack;
the limits a public-facing receiver needs are enforced here:

- at most `max_connections` connections at once, so a flood costs a bounded number of
  threads; when all are taken, a new connection takes the place of the one that has waited
  longest for a request head (a slow-loris client trickling its headers, or an idle
  keep-alive), and only when none is waiting does it get 503; a head must also arrive
  within `header_timeout` of asking for it, checked whenever a connection comes in;
- every read has a timeout (`read_timeout`) and a whole body must arrive within
  `body_timeout`, so a client that stops mid-body (or trickles) gets 408 and is dropped;
- bodies are limited before and after decompression (413), and a declared length over the
  limit is refused before a byte of it is read;
- whenever a body is left unread, the connection is closed so it cannot be misread as the
  next request.
"""

from __future__ import annotations

import contextlib
import hmac
import ipaddress
import json
import math
import socket
import ssl
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import DecodeError
from google.rpc import status_pb2
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTracePartialSuccess,
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from otel_safety.approvals import http as approvals_http
from otel_safety.approvals.store import ApprovalStore
from otel_safety.otlp import OtlpDecodeError, field_path, request_from_json, salvaged_request
from otel_safety.otlp_logs import logs_request_from_json
from otel_safety.sidecar.intake import Intake, Refusal, Refused, span_count

TRACES_PATH = "/v1/traces"
LOGS_PATH = "/v1/logs"
PROTOBUF = "application/x-protobuf"
TEXT = "text/plain; charset=utf-8"
JSON = "application/json"
TRANSPORT = "http"
_CHUNK = 64 * 1024

_STATUS = {
    Refusal.INVALID: HTTPStatus.BAD_REQUEST,
    Refusal.UNAUTHENTICATED: HTTPStatus.UNAUTHORIZED,
    Refusal.TOO_LARGE: HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
    Refusal.SATURATED: HTTPStatus.TOO_MANY_REQUESTS,
    Refusal.DRAINING: HTTPStatus.SERVICE_UNAVAILABLE,
    Refusal.UNSUPPORTED: HTTPStatus.UNSUPPORTED_MEDIA_TYPE,
}


@dataclass(frozen=True)
class HttpOptions:
    max_request_bytes: int = 20 * 1024 * 1024
    token: str | None = None
    retry_after: float = 2.0
    read_timeout: float = 10.0
    body_timeout: float = 30.0
    max_connections: int = 256
    header_timeout: float = 10.0
    # Requests decoded at once: a body's decoded spans can weigh 25 times its bytes (an
    # attribute of a few bytes costs hundreds as Python objects), so memory is bounded by
    # how many are decoded together, not by how many are received. The others wait for a
    # turn up to `decode_wait` seconds, then get a retryable 429.
    decoders: int = 2
    decode_wait: float = 10.0


class _ClientGone(Exception):
    """The client closed the connection mid-body; there is no one to answer."""


class _Timeout(Exception):
    """The body did not arrive in time."""


class OtlpHttpServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = 1024  # the listen backlog: bursts of connects wait, not fail

    def __init__(
        self,
        host: str,
        port: int,
        intake: Intake,
        options: HttpOptions,
        health: Callable[[], tuple[bool, dict[str, Any]]],
        metrics_text: Callable[[], str],
        ssl_context: ssl.SSLContext | None = None,
        approvals: ApprovalStore | None = None,
    ) -> None:
        self.approvals = approvals  # answers /approvals (None: no DuckDB store to keep them)
        self.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.intake = intake
        self.options = options
        self.health = health
        self.metrics_text = metrics_text
        self.ssl_context = ssl_context
        self._slots = threading.BoundedSemaphore(options.max_connections)
        self.decoding = threading.BoundedSemaphore(options.decoders)
        self._lock = threading.Condition()
        self._active = 0
        self._connections: set[socket.socket] = set()
        # connection -> when it started waiting for a request head
        self._waiting_heads: dict[Any, float] = {}
        super().__init__((host, port), _Handler)

    @property
    def port(self) -> int:
        return self.server_address[1]

    # -- connection accounting -------------------------------------------------------------
    def process_request(self, request: Any, client_address: Any) -> None:
        self._close_late_heads()
        if not self._slots.acquire(blocking=False) and not self._take_a_waiting_slot():
            self.intake.problems.warning(
                "OTLP/HTTP: %d connections open, refusing %s",
                self.options.max_connections,
                client_address[0],
            )
            _refuse_raw(request, self.options.retry_after)
            self.shutdown_request(request)
            return
        with self._lock:
            self._connections.add(request)
        try:
            super().process_request(request, client_address)
        except Exception:
            self._release(request)
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._release(request)

    def finish_request(self, request: Any, client_address: Any) -> None:
        request.settimeout(self.options.read_timeout)
        if self.ssl_context is not None:
            # The handshake happens here, on the connection's own thread, never on the
            # accept loop where one slow client would hold up everyone.
            try:
                request = self.ssl_context.wrap_socket(request, server_side=True)
            except (OSError, ssl.SSLError) as exc:
                self.intake.problems.warning(
                    "OTLP/HTTP: TLS handshake with %s failed: %s", client_address[0], exc
                )
                return
        super().finish_request(request, client_address)

    # -- request heads: who may be evicted ---------------------------------------------------
    def waiting_for_head(self, connection: Any) -> None:
        with self._lock:
            self._waiting_heads[connection] = time.monotonic()

    def head_read(self, connection: Any) -> None:
        with self._lock:
            self._waiting_heads.pop(connection, None)

    def _close_late_heads(self) -> None:
        """Close connections whose request head is overdue (`header_timeout`)."""
        limit = time.monotonic() - self.options.header_timeout
        with self._lock:
            late = [c for c, since in self._waiting_heads.items() if since < limit]
            for connection in late:
                self._waiting_heads.pop(connection, None)
        for connection in late:
            _hang_up(connection)

    def _take_a_waiting_slot(self) -> bool:
        """Every slot is taken: close the connection that has waited longest for a request
        head, and take its slot once its thread lets go."""
        with self._lock:
            if not self._waiting_heads:
                return False
            oldest = min(self._waiting_heads, key=self._waiting_heads.__getitem__)
            del self._waiting_heads[oldest]
        _hang_up(oldest)
        return self._slots.acquire(timeout=2.0)

    def _release(self, request: Any) -> None:
        with self._lock:
            self._waiting_heads.pop(request, None)
            if request in self._connections:
                self._connections.discard(request)
                self._slots.release()

    def begin(self) -> None:
        with self._lock:
            self._active += 1

    def end(self) -> None:
        with self._lock:
            self._active -= 1
            self._lock.notify_all()

    def drain(self, timeout: float) -> bool:
        """Stop accepting, wait for requests in progress, then close idle connections."""
        self.shutdown()
        deadline = time.monotonic() + timeout
        with self._lock:
            while self._active and time.monotonic() < deadline:
                self._lock.wait(deadline - time.monotonic())
            finished = self._active == 0
            for connection in list(self._connections):
                with contextlib.suppress(OSError):
                    connection.shutdown(socket.SHUT_RDWR)
        self.server_close()
        return finished

    def handle_error(self, request: Any, client_address: Any) -> None:
        self.intake.problems.warning("OTLP/HTTP: connection from %s failed", client_address[0])


def _loopback(address: str) -> bool:
    """A client on this machine (an IPv4 one seen by a dual-stack server too)."""
    try:
        ip = ipaddress.ip_address(address.split("%")[0])
    except ValueError:
        return False
    mapped = getattr(ip, "ipv4_mapped", None)
    return (mapped or ip).is_loopback


def _hang_up(connection: Any) -> None:
    with contextlib.suppress(OSError):
        connection.shutdown(socket.SHUT_RDWR)


def _refuse_raw(request: socket.socket, retry_after: float) -> None:
    body = b"too many connections\n"
    head = (
        f"HTTP/1.1 503 Service Unavailable\r\nRetry-After: {math.ceil(retry_after)}\r\n"
        f"Content-Type: text/plain\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    try:
        request.settimeout(1.0)
        request.sendall(head.encode("ascii") + body)
    except OSError:
        pass


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "otel-safety"
    server: OtlpHttpServer

    def version_string(self) -> str:
        return self.server_version  # not "otel-safety Python/3.x": the runtime is ours to say

    def log_message(self, format: str, *args: Any) -> None:
        pass  # problems are logged where they are understood; no access log

    def handle_one_request(self) -> None:
        self.server.waiting_for_head(self.connection)
        try:
            super().handle_one_request()
        finally:
            self.server.head_read(self.connection)

    def parse_request(self) -> bool:
        parsed = super().parse_request()  # reads the headers
        self.server.head_read(self.connection)
        return parsed

    def log_error(self, format: str, *args: Any) -> None:
        self.server.intake.problems.warning(
            "OTLP/HTTP %s: " + format, self.client_address[0], *args
        )

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """The stdlib's own refusals (bad request line, huge headers, unknown method), as
        plain text with a status line even when the request line was unreadable."""
        if self.request_version == "HTTP/0.9":
            self.request_version = "HTTP/1.1"
        self.log_error("code %d, message %s", code, message)
        status = HTTPStatus(code)
        self._reply(status, f"{message or status.phrase}\n".encode(), "text/plain", close=True)

    # -- routes -----------------------------------------------------------------------------
    def do_GET(self) -> None:
        path = self.path.partition("?")[0]
        if path == "/health":
            ok, details = self.server.health()
            body = json.dumps(details, sort_keys=True).encode()
            self._reply(HTTPStatus.OK if ok else HTTPStatus.SERVICE_UNAVAILABLE, body, JSON)
        elif path == "/metrics":
            body = self.server.metrics_text().encode()
            self._reply(HTTPStatus.OK, body, "text/plain; version=0.0.4; charset=utf-8")
        elif path in (TRACES_PATH, LOGS_PATH):
            self._reply(
                HTTPStatus.METHOD_NOT_ALLOWED, b"use POST\n", "text/plain", {"Allow": "POST"}
            )
        elif approvals_http.handles(path):
            self._approvals()
        else:
            self._reply(HTTPStatus.NOT_FOUND, b"not found\n", "text/plain")

    def do_HEAD(self) -> None:
        self._reply(HTTPStatus.METHOD_NOT_ALLOWED, b"", "text/plain", {"Allow": "GET, POST"})

    def do_POST(self) -> None:
        path = self.path.partition("?")[0]
        if approvals_http.handles(path):
            self._approvals()
            return
        if path not in (TRACES_PATH, LOGS_PATH):
            self._reply(HTTPStatus.NOT_FOUND, b"not found\n", "text/plain", close=True)
            return
        self.server.begin()
        try:
            self._export(logs=path == LOGS_PATH)
        finally:
            self.server.end()

    # -- the export -------------------------------------------------------------------------
    def _export(self, logs: bool = False) -> None:
        """One export request: traces, or (`logs`) log records for their GenAI events."""
        intake = self.server.intake
        peer = self.client_address[0]
        media = (self.headers.get("Content-Type") or "").partition(";")[0].strip().lower()
        # A client that sent neither OTLP encoding reads neither: it is answered in text.
        answer_as = media if media in (PROTOBUF, JSON) else TEXT
        try:
            self._authenticate(intake, peer)
            if media not in (PROTOBUF, JSON):
                raise intake.refuse(
                    Refusal.UNSUPPORTED,
                    f"Content-Type {media or '(none)'!r}; send {PROTOBUF} or {JSON}",
                    TRANSPORT,
                    peer,
                    0,
                )
            encoding = (self.headers.get("Content-Encoding") or "identity").strip().lower()
            if encoding not in ("identity", "gzip", "deflate"):
                raise intake.refuse(
                    Refusal.UNSUPPORTED,
                    f"Content-Encoding {encoding!r}; send gzip, deflate or none",
                    TRANSPORT,
                    peer,
                    0,
                )
            if intake.draining:
                raise intake.refuse(
                    Refusal.DRAINING, "the receiver is shutting down", TRANSPORT, peer, 0
                )
            if not logs and intake.waiting() >= intake.capacity:  # cannot take it: skip the body
                raise intake.refuse(Refusal.SATURATED, "pipeline queue full", TRANSPORT, peer, 0)
            body = self._body(intake, peer)
            if body is None:
                return
            options = self.server.options
            if not self.server.decoding.acquire(timeout=options.decode_wait):
                raise intake.refuse(
                    Refusal.SATURATED,
                    f"{options.decoders} requests are being decoded; none finished in "
                    f"{options.decode_wait:g} s",
                    TRANSPORT,
                    peer,
                    0,
                )
            try:
                data = _inflate(intake, peer, body, encoding, options.max_request_bytes)
                del body
                if logs:
                    decoded_logs = self._decode_logs(intake, peer, media, data)
                    intake.admit_logs(decoded_logs, TRANSPORT, peer)
                else:
                    request, dropped, problems = self._decode(intake, peer, media, data)
                    admitted = intake.admit(request, TRANSPORT, peer, (dropped, problems))
            finally:
                self.server.decoding.release()
        except Refused as refused:
            self._refused(refused, answer_as)
            return
        if logs:
            answer = _encode(ExportLogsServiceResponse(), answer_as)
            self._reply(HTTPStatus.OK, answer, answer_as, close=intake.draining)
            return
        response = ExportTraceServiceResponse()
        if admitted.message:
            response.partial_success.CopyFrom(
                ExportTracePartialSuccess(
                    rejected_spans=admitted.rejected, error_message=admitted.message
                )
            )
        self._reply(HTTPStatus.OK, _encode(response, answer_as), answer_as, close=intake.draining)

    # -- approvals ----------------------------------------------------------------------------
    def _approvals(self) -> None:
        """List or answer the guard's approval requests (otel_safety.approvals.http)."""
        token = self.server.options.token
        given = self.headers.get("Authorization") or ""
        if token is not None and not hmac.compare_digest(
            given.encode(), f"Bearer {token}".encode()
        ):
            self.server.intake.metrics.add("approval_requests", outcome="unauthenticated")
            body = json.dumps({"error": "no or wrong bearer token"}).encode()
            headers = {"WWW-Authenticate": 'Bearer realm="otel-safety"'}
            self._reply(HTTPStatus.UNAUTHORIZED, body, JSON, headers, close=True)
            return
        if token is None and not _loopback(self.client_address[0]):
            self.server.intake.metrics.add("approval_requests", outcome="forbidden")
            message = "approvals answer other hosts only behind a bearer token: start serve "
            body = json.dumps({"error": message + "with --token-file"}).encode()
            self._reply(HTTPStatus.FORBIDDEN, body, JSON, close=True)
            return
        data = b""
        if self.command == "POST":
            declared = self.headers.get("Content-Length") or "0"
            if not declared.isdigit() or int(declared) > approvals_http.MAX_BODY_BYTES:
                body = json.dumps({"error": "give a Content-Length of at most 16 KiB"}).encode()
                self._reply(HTTPStatus.BAD_REQUEST, body, JSON, close=True)
                return
            deadline = time.monotonic() + self.server.options.body_timeout
            try:
                data = self._read(int(declared), deadline)
            except (_Timeout, _ClientGone):
                self.close_connection = True
                return
        self.server.begin()
        try:
            status, document = approvals_http.answer(
                self.server.approvals, self.command, self.path, data, self.client_address[0]
            )
        finally:
            self.server.end()
        self.server.intake.metrics.add("approval_requests", outcome=str(status.value))
        self._reply(status, json.dumps(document).encode(), JSON)

    def _authenticate(self, intake: Intake, peer: str) -> None:
        token = self.server.options.token
        if token is None:
            return
        given = self.headers.get("Authorization") or ""
        if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
            what = "no bearer token" if not given else "wrong bearer token"
            raise intake.refuse(Refusal.UNAUTHENTICATED, what, TRANSPORT, peer, 0)

    def _body(self, intake: Intake, peer: str) -> bytes | None:
        """The request body within the limits, or None when the client went away."""
        limit = self.server.options.max_request_bytes
        deadline = time.monotonic() + self.server.options.body_timeout
        try:
            if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
                return self._chunked(intake, peer, limit, deadline)
            declared = self.headers.get("Content-Length")
            if declared is None:
                self._reply(
                    HTTPStatus.LENGTH_REQUIRED,
                    b"Content-Length required\n",
                    "text/plain",
                    close=True,
                )
                intake.refuse(Refusal.INVALID, "no Content-Length", TRANSPORT, peer, 0)
                return None
            try:
                length = int(declared)
                if length < 0:
                    raise ValueError
            except ValueError:
                raise intake.refuse(
                    Refusal.INVALID, f"bad Content-Length {declared[:40]!r}", TRANSPORT, peer, 0
                ) from None
            if length > limit:
                raise intake.refuse(
                    Refusal.TOO_LARGE,
                    f"body of {length} bytes, over the {limit}-byte limit",
                    TRANSPORT,
                    peer,
                    0,
                )
            return self._read(length, deadline)
        except _Timeout:
            self._reply(
                HTTPStatus.REQUEST_TIMEOUT, b"body not received in time\n", "text/plain", close=True
            )
            intake.refuse(Refusal.INVALID, "body not received in time", TRANSPORT, peer, 0)
        except _ClientGone:
            self.close_connection = True
            intake.refuse(
                Refusal.INVALID, "client closed the connection mid-body", TRANSPORT, peer, 0
            )
        return None

    def _read(self, length: int, deadline: float) -> bytes:
        parts: list[bytes] = []
        remaining = length
        while remaining:
            if time.monotonic() > deadline:
                raise _Timeout
            try:
                data = self.rfile.read1(min(remaining, _CHUNK))
            except TimeoutError:
                raise _Timeout from None
            except (ConnectionError, ssl.SSLError, OSError):
                raise _ClientGone from None
            if not data:
                raise _ClientGone
            parts.append(data)
            remaining -= len(data)
        return b"".join(parts)

    def _line(self, deadline: float) -> bytes:
        if time.monotonic() > deadline:
            raise _Timeout
        try:
            line = self.rfile.readline(1024)
        except TimeoutError:
            raise _Timeout from None
        except OSError:
            raise _ClientGone from None
        if not line:
            raise _ClientGone
        return line

    def _chunked(self, intake: Intake, peer: str, limit: int, deadline: float) -> bytes:
        parts: list[bytes] = []
        total = 0
        while True:
            line = self._line(deadline)
            try:
                size = int(line.split(b";", 1)[0].strip(), 16)
                if size < 0:
                    raise ValueError
            except ValueError:
                raise intake.refuse(
                    Refusal.INVALID, "malformed chunked body", TRANSPORT, peer, 0
                ) from None
            if size == 0:
                while self._line(deadline) not in (b"\r\n", b"\n"):
                    pass  # trailers
                return b"".join(parts)
            total += size
            if total > limit:
                raise intake.refuse(
                    Refusal.TOO_LARGE,
                    f"chunked body over the {limit}-byte limit",
                    TRANSPORT,
                    peer,
                    0,
                )
            parts.append(self._read(size, deadline))
            self._line(deadline)  # the CRLF after each chunk

    def _decode(
        self, intake: Intake, peer: str, media: str, body: bytes
    ) -> tuple[ExportTraceServiceRequest, int, list[str]]:
        """The request, with the spans of an OTLP/JSON request that did not parse left out:
        (request, how many, why each)."""
        return self._decode_as(
            intake,
            peer,
            media,
            body,
            ExportTraceServiceRequest,
            request_from_json,
            "trace",
            salvage=salvaged_request,
        )

    def _decode_logs(
        self, intake: Intake, peer: str, media: str, body: bytes
    ) -> ExportLogsServiceRequest:
        return self._decode_as(
            intake, peer, media, body, ExportLogsServiceRequest, logs_request_from_json, "logs"
        )[0]

    def _decode_as(
        self,
        intake: Intake,
        peer: str,
        media: str,
        body: bytes,
        message: type[Any],
        from_json: Callable[[Any], Any],
        signal: str,
        salvage: Callable[[dict[str, Any]], tuple[Any, int, list[str]]] | None = None,
    ) -> tuple[Any, int, list[str]]:
        """The request in `body` (protobuf or OTLP/JSON), or a refusal naming what is wrong;
        with `salvage`, an OTLP/JSON request refused as a whole is taken span by span, and
        only a request with no usable span is refused."""
        document = None
        try:
            if media == PROTOBUF:
                return message.FromString(body), 0, []
            document = json.loads(_lenient_text(intake, peer, body))
            return from_json(document), 0, []
        except (DecodeError, RuntimeError, ValueError) as exc:
            if salvage and isinstance(exc, OtlpDecodeError) and isinstance(document, dict):
                salvaged, dropped, problems = salvage(document)
                if dropped and span_count(salvaged):
                    return salvaged, dropped, problems
            # RecursionError is a RuntimeError; json.JSONDecodeError and OtlpDecodeError are
            # ValueErrors.
            reason = str(exc)
            if media == PROTOBUF:
                kind = f"invalid protobuf ({len(body)} bytes)"
            elif isinstance(exc, OtlpDecodeError):
                kind = f"not an OTLP {signal} request"
                reason = field_path(reason)  # "spans.attributes.value.intValue: ..."
            else:
                kind = "invalid JSON"
            problem = f"{kind}: {reason[:300] or type(exc).__name__}"
        raise intake.refuse(Refusal.INVALID, problem, TRANSPORT, peer, 0)

    # -- answers ----------------------------------------------------------------------------
    def _refused(self, refused: Refused, content_type: str) -> None:
        status = _STATUS[refused.refusal]
        headers = {}
        if refused.refusal.retryable:
            headers["Retry-After"] = str(math.ceil(self.server.options.retry_after))
        if refused.refusal is Refusal.UNAUTHENTICATED:
            headers["WWW-Authenticate"] = 'Bearer realm="otel-safety"'
        body = (
            (refused.message + "\n").encode()
            if content_type == TEXT
            else _encode(
                status_pb2.Status(code=_RPC_CODE[refused.refusal], message=refused.message),
                content_type,
            )
        )
        # Anything refused before its body was read leaves bytes on the connection: close it.
        self._reply(status, body, content_type, headers, close=True)

    def _reply(
        self,
        status: HTTPStatus,
        body: bytes,
        content_type: str,
        headers: dict[str, str] | None = None,
        close: bool = False,
    ) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            if close or self.server.intake.draining:
                self.send_header("Connection", "close")
                self.close_connection = True
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)
        except OSError:
            self.close_connection = True


# google.rpc.Code numbers for the Status body (informational in OTLP/HTTP).
_RPC_CODE = {
    Refusal.INVALID: 3,  # INVALID_ARGUMENT
    Refusal.UNAUTHENTICATED: 16,
    Refusal.TOO_LARGE: 8,  # RESOURCE_EXHAUSTED
    Refusal.SATURATED: 8,
    Refusal.DRAINING: 14,  # UNAVAILABLE
    Refusal.UNSUPPORTED: 3,
}


def _encode(message: Any, content_type: str) -> bytes:
    if content_type == JSON:
        return json_format.MessageToJson(message, indent=None).encode()
    return message.SerializeToString()


def _lenient_text(intake: Intake, peer: str, body: bytes) -> str:
    """A JSON body as text; bytes that are not UTF-8 become U+FFFD, as `ingest` reads them,
    logged rather than costing the request around them."""
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as exc:
        intake.problems.warning(
            "%s request from %s: bytes that are not UTF-8 (the first at byte %d) were read "
            "as U+FFFD",
            TRANSPORT,
            peer,
            exc.start,
        )
        return body.decode("utf-8", errors="replace")


def _inflate(intake: Intake, peer: str, body: bytes, encoding: str, limit: int) -> bytes:
    """Decompress with the size limit applied to the output, so a zip bomb costs nothing.
    A gzip body may hold several members (RFC 1952), each inflated in turn; any other bytes
    after the stream are refused rather than dropped unread."""
    if encoding == "identity":
        return body
    wbits = 16 + zlib.MAX_WBITS if encoding == "gzip" else zlib.MAX_WBITS
    parts: list[bytes] = []
    size, rest = 0, body
    while True:
        inflater = zlib.decompressobj(wbits)
        try:
            part = inflater.decompress(rest, limit + 1 - size)
            if size + len(part) <= limit and not inflater.unconsumed_tail:
                part += inflater.flush()
        except zlib.error as exc:
            raise intake.refuse(
                Refusal.INVALID, f"bad {encoding} body: {exc}", TRANSPORT, peer, 0
            ) from None
        parts.append(part)
        size += len(part)
        if size > limit or inflater.unconsumed_tail:
            raise intake.refuse(
                Refusal.TOO_LARGE,
                f"body over the {limit}-byte limit once decompressed",
                TRANSPORT,
                peer,
                0,
            )
        if not inflater.eof:
            raise intake.refuse(Refusal.INVALID, f"truncated {encoding} body", TRANSPORT, peer, 0)
        rest = inflater.unused_data
        if not rest:
            return b"".join(parts)
        if encoding != "gzip":
            raise intake.refuse(
                Refusal.INVALID,
                f"{len(rest)} bytes after the {encoding} stream",
                TRANSPORT,
                peer,
                0,
            )
