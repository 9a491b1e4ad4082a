"""One deep analysis: ask the model, check its answer, retry a bad one once.

The maintained `openai` client (the `deep` extra) speaks to any OpenAI-compatible endpoint
and retries connection errors, 429s and 5xx with exponential backoff itself
(`max_retries`); this module adds the one thing it cannot know: an answer that is not the
JSON asked for is asked again once, then recorded as an error, never as a verdict.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from otel_safety.deep.prompt import messages
from otel_safety.deep.reply import DeepReply, ReplyError, parse_reply
from otel_safety.deep.settings import DeepConfig
from otel_safety.model import Finding, Trajectory


@dataclass
class Outcome:
    """What one analysis cost and gave: a checked reply, or an error saying why not."""

    reply: DeepReply | None
    error: str | None
    seconds: float
    calls: int  # requests answered (a retried bad reply counts twice)
    prompt_tokens: int
    completion_tokens: int

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class DeepClient:
    """Thread-safe: the worker threads share one client and its connection pool."""

    def __init__(self, config: DeepConfig) -> None:
        import openai

        self.config = config
        self._errors = (openai.APIError,)
        self._client = openai.OpenAI(
            base_url=config.base_url,
            api_key=config.api_key,
            timeout=config.timeout,
            max_retries=config.retries,
        )

    def analyse(
        self,
        trajectory: Trajectory,
        findings: Sequence[Finding] = (),
        *,
        timeout: float | None = None,
        retries: int | None = None,
    ) -> Outcome:
        """The model's analysis of one run. `timeout`/`retries` override the configured ones
        for one call (the inline guard has a deadline of its own). Never raises."""
        config = self.config
        client = self._client
        if timeout is not None or retries is not None:
            client = client.with_options(
                timeout=config.timeout if timeout is None else timeout,
                max_retries=config.retries if retries is None else retries,
            )
        chat = messages(config.prompt, trajectory, findings, config.field_chars)
        started = time.perf_counter()
        tally = Outcome(None, None, 0.0, 0, 0, 0)
        for attempt in (1, 2):
            try:
                response = client.chat.completions.create(
                    model=config.model,
                    messages=chat,  # type: ignore[arg-type]
                    max_tokens=config.max_tokens,
                    temperature=0,
                    response_format={"type": "json_object"},
                )
            except self._errors as exc:
                tally.error = f"request failed: {type(exc).__name__}: {_short(exc)}"
                break
            tally.calls += 1
            _count_usage(tally, response)
            text = _text(response)
            try:
                tally.reply = parse_reply(text)
                break
            except ReplyError as exc:
                if attempt == 2:
                    tally.error = f"unparseable reply, twice: {exc}"
                    break
                chat = [
                    *chat,
                    {"role": "assistant", "content": text or ""},
                    {"role": "user", "content": config.prompt.retry.format(problem=exc)},
                ]
        tally.seconds = time.perf_counter() - started
        return tally


def _text(response: Any) -> str | None:
    try:
        return response.choices[0].message.content
    except (AttributeError, IndexError, TypeError):
        return None


def _count_usage(tally: Outcome, response: Any) -> None:
    usage = getattr(response, "usage", None)
    tally.prompt_tokens += int(getattr(usage, "prompt_tokens", 0) or 0)
    tally.completion_tokens += int(getattr(usage, "completion_tokens", 0) or 0)


def _short(exc: BaseException, limit: int = 300) -> str:
    text = str(exc).replace("\n", " ")
    return text if len(text) <= limit else text[:limit] + "..."
