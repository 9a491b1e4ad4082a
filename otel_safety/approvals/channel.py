"""The guard's channel to a person: store the request, notify a webhook, wait for the answer.

The request waits in the store until someone answers it (`otel-safety approve|deny`,
`serve`'s `/approvals` endpoint, the dashboard) or it expires. A request the same
requester made before for the same call is not asked again: a pending one is waited on,
and an answer given within `reuse_within` seconds is reused.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

from otel_safety.approvals.request import Answer, ApprovalRequest, summary
from otel_safety.approvals.store import DEFAULT_TIMEOUT, Approval, ApprovalStore
from otel_safety.approvals.webhook import WebhookNotifier, approval_event
from otel_safety.exporters.duckdb import StoreError
from otel_safety.guard.verdict import Verdict

logger = logging.getLogger(__name__)

ANSWERS = ("approved", "denied")
_GRACE = 0.5  # seconds past the expiry for the store to say "expired" itself


class ApprovalChannel:
    """Ask through the store. `webhook` is an http(s) URL (or a notifier) told about each
    request; `base_url` is `serve`'s address, for approve/deny links in that message."""

    def __init__(
        self,
        store: ApprovalStore | str | Path,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        reuse_within: float = 900.0,
        webhook: str | WebhookNotifier | None = None,
        base_url: str | None = None,
        poll: float = 1.0,
    ) -> None:
        if timeout <= 0:
            raise ValueError(f"the approval timeout must be positive, got {timeout}")
        self.store = store if isinstance(store, ApprovalStore) else ApprovalStore(store)
        self.store.lock_wait = min(self.store.lock_wait, timeout)
        self.timeout = timeout
        self.reuse_within = reuse_within
        self.notifier = WebhookNotifier(webhook) if isinstance(webhook, str) else webhook
        self.base_url = base_url
        self.poll = poll
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()

    def ask(self, verdict: Verdict, request: ApprovalRequest) -> Answer:
        """Approved, denied or expired, with the stored request and who answered it; a
        request that cannot be stored is denied."""
        started = time.monotonic()
        try:
            approval, created = self._pending_or_answered(verdict, request)
            if not approval.pending:
                self._count(f"reused_{approval.status}")
                return Answer(approval.status, approval.id, approval.decided_by)
            left = (approval.expires_at - datetime.now(UTC)).total_seconds()
            until = started + max(0.0, min(self.timeout, left)) + _GRACE
            final = self.store.wait(approval.id, until, self.poll) or approval
            if final.pending:  # the store's clock and ours disagree: close it ourselves
                final = self.store.expire(approval.id) or final
        except StoreError as exc:
            self._count("store_errors")
            logger.error(
                "otel-safety could not ask for approval of %s (%s); the call is denied",
                verdict.tool,
                exc,
            )
            return Answer("denied")
        status = final.status if final.status in ANSWERS else "expired"
        self._count(status)
        if status == "expired":
            logger.warning(
                "otel-safety approval %s expired unanswered: %s", final.id, final.summary
            )
        if created:
            self._notify(final, "approval.closed")
        return Answer(status, final.id, final.decided_by if status in ANSWERS else None)

    def _pending_or_answered(
        self, verdict: Verdict, request: ApprovalRequest
    ) -> tuple[Approval, bool]:
        """The same request's pending or recent approval, or a new one (and whether new)."""
        with self._lock:  # one transaction: no other thread or process asks in between
            approval, created = self.store.similar_or_create(
                self.reuse_within,
                self.timeout,
                tool=verdict.tool,
                category=verdict.category,
                risk=verdict.risk,
                summary=summary(verdict),
                reasons=verdict.reasons,
                arguments=request.arguments,
                requester=verdict.requester,
                trace_id=request.trace_id,
                span_id=request.span_id,
                conversation=request.conversation,
                fingerprint=request.fingerprint,
            )
        if not created:
            return approval, False
        self._count("asked")
        logger.warning(
            "otel-safety approval %s pending (answer within %.0fs: otel-safety approve|deny "
            "%s --db %s): %s",
            approval.id,
            self.timeout,
            approval.id,
            self.store.path,
            approval.summary,
        )
        self._notify(approval, "approval.requested")
        return approval, True

    def _notify(self, approval: Approval, event: str) -> None:
        if self.notifier is None:
            return
        payload = approval_event(
            approval,
            event,
            db_path=str(Path(self.store.path).resolve()),
            base_url=self.base_url,
        )
        self.notifier.notify(payload)

    def _count(self, name: str) -> None:
        with self._lock:
            self.counts[name] += 1

    def stats(self) -> dict[str, int]:
        """Requests asked, answers by kind, reuses, store errors, and the webhook's counts."""
        with self._lock:
            counts = dict(self.counts)
        if self.notifier is not None:
            counts.update({f"webhook_{k}": v for k, v in self.notifier.counts.items()})
        return counts

    def close(self) -> None:
        if self.notifier is not None:
            self.notifier.close()
