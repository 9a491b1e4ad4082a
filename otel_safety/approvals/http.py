"""The approvals endpoint of `serve`: list requests and answer them over HTTP, as JSON.

    GET  /approvals                 pending requests, oldest first (?recent=N: latest N)
    GET  /approvals/{id}            one request
    POST /approvals/{id}/approve    body (optional): {"by": "...", "note": "..."}
    POST /approvals/{id}/deny
    POST /approvals/{id}/withdraw   take an answer back: similar calls are asked about again

Errors answer {"error": "..."} with 400 (bad body), 404 (unknown id), 409 (already
answered or expired) or 503 (the store is held elsewhere for too long: retry).
The HTTP server checks the bearer token before calling in here.
"""

from __future__ import annotations

import json
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qs

from otel_safety.approvals.store import AlreadyDecided, ApprovalStore, UnknownApproval
from otel_safety.exporters.duckdb import StoreError

PREFIX = "/approvals"
MAX_BODY_BYTES = 16 * 1024
MAX_TEXT = 500


def handles(path: str) -> bool:
    return path == PREFIX or path.startswith(PREFIX + "/")


def answer(
    store: ApprovalStore | None, method: str, target: str, body: bytes, peer: str
) -> tuple[HTTPStatus, dict[str, Any] | list[Any]]:
    """(status, JSON document) for one request to the approvals endpoint."""
    path, _, query = target.partition("?")
    parts = [p for p in path.split("/") if p][1:]  # after "approvals"
    if store is None:
        return _error(
            HTTPStatus.NOT_FOUND,
            "approvals live in the DuckDB store: run serve with --db (not --lake or --no-store)",
        )
    try:
        if method == "GET" and not parts:
            recent = _recent(parse_qs(query).get("recent", [""])[0])
            found = store.recent(recent) if recent else store.pending()
            return HTTPStatus.OK, [a.model_dump(mode="json") for a in found]
        if method == "GET" and len(parts) == 1:
            approval = store.get(parts[0])
            if approval is None:
                return _error(HTTPStatus.NOT_FOUND, f"no approval {parts[0]!r} in this store")
            return HTTPStatus.OK, approval.model_dump(mode="json")
        if method == "POST" and len(parts) == 2 and parts[1] in ("approve", "deny", "withdraw"):
            fields = _fields(body)
            by, note = fields.get("by") or f"http {peer}", fields.get("note") or None
            if parts[1] == "withdraw":
                decided = store.withdraw(parts[0], by=by, note=note)
            else:
                decided = store.decide(parts[0], parts[1] == "approve", by=by, note=note)
            return HTTPStatus.OK, decided.model_dump(mode="json")
    except _BadRequest as exc:
        return _error(HTTPStatus.BAD_REQUEST, str(exc))
    except UnknownApproval as exc:
        return _error(HTTPStatus.NOT_FOUND, str(exc))
    except AlreadyDecided as exc:
        return _error(HTTPStatus.CONFLICT, str(exc))
    except StoreError as exc:
        return _error(HTTPStatus.SERVICE_UNAVAILABLE, f"{exc}; retry shortly")
    allowed = "GET" if len(parts) < 2 else "POST"
    return _error(
        HTTPStatus.NOT_FOUND if method == allowed else HTTPStatus.METHOD_NOT_ALLOWED,
        f"{method} {path} is not an approvals route: GET /approvals, GET /approvals/ID, "
        "POST /approvals/ID/approve, POST /approvals/ID/deny, POST /approvals/ID/withdraw",
    )


class _BadRequest(ValueError):
    pass


def _fields(body: bytes) -> dict[str, str]:
    if not body.strip():
        return {}
    try:
        document = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise _BadRequest(
            f'the body must be JSON like {{"by": "alice", "note": "ok"}}: {exc}'
        ) from None
    if not isinstance(document, dict):
        raise _BadRequest('the body must be a JSON object like {"by": "alice", "note": "ok"}')
    fields = {}
    for name in ("by", "note"):
        value = document.get(name)
        if value is None:
            continue
        if not isinstance(value, str):
            raise _BadRequest(f"{name!r} must be a string")
        fields[name] = value.strip()[:MAX_TEXT]
    return fields


def _recent(text: str) -> int:
    if not text:
        return 0
    try:
        value = int(text)
    except ValueError:
        raise _BadRequest(f"recent must be a whole number, got {text[:20]!r}") from None
    return max(1, min(value, 1000))


def _error(status: HTTPStatus, message: str) -> tuple[HTTPStatus, dict[str, Any]]:
    return status, {"error": message}
