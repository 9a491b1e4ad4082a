"""Tell a webhook that an approval is waiting (and when it closed), as generic JSON.

The payload carries a ready `text` line (Slack, Mattermost and Teams incoming webhooks show
it as is) and the fields a bot needs to relay the request and answer it: the id, the
summary, the commands and, when `serve`'s address is known, the URLs to approve or deny.
Posting happens on one background thread from a bounded queue, so a slow or dead webhook
never holds up the guard; failures are logged and counted, never raised.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import urllib.request
from collections import Counter
from typing import Any
from urllib.parse import urlsplit

from otel_safety.approvals.store import Approval

logger = logging.getLogger(__name__)

_STOP = object()


class WebhookNotifier:
    """POST approval events to `url`; `counts` says how many were sent, failed, dropped."""

    def __init__(
        self,
        url: str,
        *,
        timeout: float = 5.0,
        max_queued: int = 100,
        headers: dict[str, str] | None = None,
    ) -> None:
        scheme = urlsplit(url).scheme
        if scheme not in ("http", "https"):
            raise ValueError(f"the approval webhook must be an http(s) URL, got {url!r}")
        self.url = url
        self.timeout = timeout
        self.headers = {"Content-Type": "application/json", **(headers or {})}
        self.counts: Counter[str] = Counter()
        self._counts_lock = threading.Lock()
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=max_queued)
        self._thread = threading.Thread(
            target=self._run, name="otel-safety-approval-webhook", daemon=True
        )
        self._thread.start()

    def notify(self, payload: dict[str, Any]) -> None:
        """Queue one event; when the queue is full it is dropped (and counted), not waited for."""
        try:
            self._queue.put_nowait(payload)
        except queue.Full:
            self._count("dropped")
            logger.warning(
                "otel-safety approval webhook %s is not keeping up; dropped the event for %s "
                "(%d dropped so far)",
                self.url,
                payload.get("id"),
                self.counts["dropped"],
            )

    def _count(self, name: str) -> None:
        with self._counts_lock:
            self.counts[name] += 1

    def _run(self) -> None:
        while True:
            payload = self._queue.get()
            if payload is _STOP:
                return
            self._post(payload)

    def _post(self, payload: dict[str, Any]) -> None:
        body = json.dumps(payload, ensure_ascii=False).encode("utf-8")
        request = urllib.request.Request(self.url, body, self.headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                response.read(1024)
            self._count("sent")
        except Exception as exc:  # a refused socket, a reply that is not HTTP, a bad URL
            self._count("failed")
            logger.warning(
                "otel-safety could not notify the approval webhook %s about %s: %s "
                "(%d failed so far); the request still waits in the store",
                self.url,
                payload.get("id"),
                exc,
                self.counts["failed"],
            )

    def close(self, wait: float = 2.0) -> None:
        """Send what is queued, for up to `wait` seconds, then stop."""
        try:
            self._queue.put(_STOP, timeout=wait)
        except queue.Full:
            return
        self._thread.join(wait)


def approval_event(
    approval: Approval, event: str, *, db_path: str, base_url: str | None = None
) -> dict[str, Any]:
    """The JSON for one event ("approval.requested" or "approval.closed")."""
    store = f" --db {db_path}"
    approve = {"command": f"otel-safety approve {approval.id}{store}"}
    deny = {"command": f"otel-safety deny {approval.id}{store}"}
    if base_url:
        root = base_url.rstrip("/")
        approve["url"] = f"{root}/approvals/{approval.id}/approve"
        deny["url"] = f"{root}/approvals/{approval.id}/deny"
    if event == "approval.requested":
        text = (
            f"otel-safety {approval.id} needs approval: {approval.summary}. "
            f"Approve: `{approve['command']}`; deny: `{deny['command']}` "
            f"(expires {approval.expires_at:%H:%M:%S} UTC)"
        )
    else:
        by = f" by {approval.decided_by}" if approval.decided_by else ""
        text = f"otel-safety {approval.id} {approval.status}{by}: {approval.summary}"
    return {
        "event": event,
        "text": text,
        **approval.model_dump(mode="json"),
        "approve": approve,
        "deny": deny,
    }
