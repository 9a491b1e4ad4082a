"""Human approval for calls the guard will not decide alone: ask, wait, remember the answer.

A person is asked either through the approvals channel (`otel_safety.approvals`: the
request waits in the store and is answered from the CLI, `serve`'s HTTP endpoint or the
dashboard) or through the user's callable (a chat prompt, a ticket, a pager), which runs on
its own thread. Either way an unanswered request expires after `timeout` seconds and counts
as denied. Answers are cached per requester and similar request (same tool, category and
normalised arguments) for `ttl` seconds, so a person is not asked the same thing twice. A
channel's answers are reused through the store, where an answer withdrawn (`otel-safety
withdraw`) is no longer reused; the gate keeps them in memory for `CHANNEL_RECHECK` seconds
only, so that a repeated call costs a dict lookup, not a store read, and a withdrawal
reaches it within those seconds.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING

from otel_safety.approvals.request import DEFAULT_TIMEOUT, Answer, ApprovalRequest
from otel_safety.guard.verdict import Verdict

if TYPE_CHECKING:
    from otel_safety.approvals.channel import ApprovalChannel

logger = logging.getLogger(__name__)

Approver = Callable[[Verdict], bool]

CHANNEL_RECHECK = 5.0  # seconds a channel's answer is reused from memory before the store
MAX_WAITING_APPROVALS = 64  # approver calls left hanging before it is no longer asked
# What an approver may answer to approve besides True; anything else denies.
_YES = frozenset({"approved", "approve", "allow", "allowed", "yes", "y", "true"})


def approves(answer: object) -> bool:
    """Whether an approver's answer approves: True, or a word that says so ("approved",
    "yes"). A string is not a yes for being non-empty: "denied" or "no" deny."""
    if answer is True:
        return True
    if isinstance(answer, str):
        return answer.strip().lower() in _YES
    if answer is not False and answer is not None:  # identity: any object may be answered
        logger.warning("otel-safety approver answered %r, not True or False: denied", answer)
    return False


def approver_name(approver: Approver) -> str:
    """Who answered, for the audit log, when the answer came from the app's callable."""
    name = getattr(approver, "__qualname__", None) or type(approver).__qualname__
    return f"approver {getattr(approver, '__module__', None) or '?'}.{name}"


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
        self._cache: OrderedDict[tuple[str, str, str, str], tuple[float, Answer]] = OrderedDict()
        self._lock = threading.Lock()
        self._waiting = 0  # approver calls started and not yet returned

    def decide(self, verdict: Verdict, request: ApprovalRequest | None = None) -> Answer:
        """Approved, denied or expired (a cached answer counts as given, by whoever gave
        it), with the stored request answered and who answered it where known."""
        request = request or ApprovalRequest()
        key = (verdict.requester or "", verdict.tool, verdict.category, request.fingerprint)
        now = self._clock()
        held_for = self.ttl if self.channel is None else min(self.ttl, CHANNEL_RECHECK)
        with self._lock:
            cached = self._cache.get(key)
            if cached is not None and now - cached[0] <= held_for:
                return cached[1]
        if self.channel is not None:
            answer = self.channel.ask(verdict, request)
        else:
            answer = self._call_approver(verdict)
        if answer.status in ("approved", "denied"):
            with self._lock:
                self._cache[key] = (now, answer)
                self._cache.move_to_end(key)
                while len(self._cache) > self.max_cached:
                    self._cache.popitem(last=False)
        return answer

    def _call_approver(self, verdict: Verdict) -> Answer:
        """Ask the callable on a thread of its own: one that never returns keeps its thread,
        not the next request's (a pool of a few threads, once filled by hung calls, let
        every later request expire without anyone being asked)."""
        assert self.approver is not None
        by = approver_name(self.approver)
        with self._lock:
            if self._waiting >= MAX_WAITING_APPROVALS:
                logger.warning(
                    "otel-safety approver has %d requests it never answered; not asking it "
                    "about %s (the call is blocked)",
                    self._waiting,
                    verdict.summary(),
                )
                return Answer("expired")
            self._waiting += 1
        done = threading.Event()
        answers: list[object] = []
        failures: list[BaseException] = []

        def ask() -> None:
            try:
                answers.append(self.approver(verdict.model_copy(deep=True)))  # type: ignore[misc]
            except BaseException as exc:
                failures.append(exc)
            finally:
                with self._lock:
                    self._waiting -= 1
                done.set()

        threading.Thread(target=ask, name="otel-safety-approval", daemon=True).start()
        if not done.wait(self.timeout):
            logger.warning(
                "otel-safety approval expired after %.0fs: %s", self.timeout, verdict.summary()
            )
            return Answer("expired")
        if failures:
            logger.error(
                "otel-safety approver failed; treating the call as denied",
                exc_info=failures[0],
            )
            return Answer("denied", decided_by=f"{by} (failed)")
        return Answer("approved" if approves(answers[0]) else "denied", decided_by=by)

    def close(self) -> None:
        if self.channel is not None:
            self.channel.close()
