"""Human approval for calls the guard will not decide alone: ask, wait, remember the answer.

A person is asked either through the approvals channel (`otel_safety.approvals`: the
request waits in the store and is answered from the CLI, `serve`'s HTTP endpoint or the
dashboard) or through the user's callable (a chat prompt, a ticket, a pager), which runs on
its own thread. Either way an unanswered request expires after `timeout` seconds and counts
as denied. Answers are cached per requester and similar request (same tool, category and
normalised arguments) for `ttl` seconds, so a person is not asked the same thing twice.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import TYPE_CHECKING

from otel_safety.approvals.request import DEFAULT_TIMEOUT, ApprovalRequest
from otel_safety.guard.verdict import Verdict

if TYPE_CHECKING:
    from otel_safety.approvals.channel import ApprovalChannel

logger = logging.getLogger(__name__)

Approver = Callable[[Verdict], bool]


class ApprovalGate:
    def __init__(
        self,
        approver: Approver | None = None,
        *,
        channel: ApprovalChannel | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        ttl: float = 900.0,
        max_cached: int = 4096,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if (approver is None) == (channel is None):
            raise ValueError("an approval gate asks either an approver callable or a channel")
        self.approver = approver
        self.channel = channel
        self.timeout = timeout
        self.ttl = ttl
        self.max_cached = max_cached
        self._clock = clock
        self._cache: OrderedDict[tuple[str, str, str, str], tuple[float, bool]] = OrderedDict()
        self._lock = threading.Lock()
        self._pool = (
            ThreadPoolExecutor(max_workers=4, thread_name_prefix="otel-safety-approval")
            if approver is not None
            else None
        )

    def decide(self, verdict: Verdict, request: ApprovalRequest | None = None) -> str:
        """'approved', 'denied' or 'expired' (a cached answer counts as given)."""
        request = request or ApprovalRequest()
        key = (verdict.requester or "", verdict.tool, verdict.category, request.fingerprint)
        now = self._clock()
        with self._lock:
            cached = self._cache.get(key)
            if cached is not None and now - cached[0] <= self.ttl:
                return "approved" if cached[1] else "denied"
        if self.channel is not None:
            answer = self.channel.ask(verdict, request)
        else:
            answer = self._call_approver(verdict)
        if answer in ("approved", "denied"):
            with self._lock:
                self._cache[key] = (now, answer == "approved")
                self._cache.move_to_end(key)
                while len(self._cache) > self.max_cached:
                    self._cache.popitem(last=False)
        return answer

    def _call_approver(self, verdict: Verdict) -> str:
        assert self._pool is not None and self.approver is not None
        future = self._pool.submit(self.approver, verdict.model_copy(deep=True))
        try:
            answer = bool(future.result(timeout=self.timeout))
        except FutureTimeout:
            future.cancel()
            logger.warning(
                "otel-safety approval expired after %.0fs: %s", self.timeout, verdict.summary()
            )
            return "expired"
        except Exception:
            logger.exception("otel-safety approver failed; treating the call as denied")
            return "denied"
        return "approved" if answer else "denied"

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
        if self.channel is not None:
            self.channel.close()
