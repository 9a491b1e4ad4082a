"""An agent's turns in a trajectory: each answer it gave, with the request it answered.

Behaviour monitors compare an agent with itself over turns, so they need the answers in
order, attributed to the agent that gave them (`Message.agent`, from `gen_ai.agent.name`),
and a stable digest so that a run replaying its history does not count old turns again.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from otel_safety.analysis.memo import content_memo
from otel_safety.model import Trajectory

__all__ = ["DEFAULT_AGENT", "AgentTurn", "agent_turns"]

DEFAULT_AGENT = "(unnamed)"  # traces that name no agent are one agent's turns; as the queries say
MAX_CHARS = 8_000  # of a request or answer: its head and tail, so no text can slow us down


@dataclass(frozen=True)
class AgentTurn:
    """One answer of one agent: what it was asked, what it said, and the tools it used."""

    agent: str
    prompt: str
    text: str
    span_id: str | None
    tool_calls: tuple[str, ...] = field(default=())  # names of the calls it made on the way
    tool_errors: int = 0  # tool results that were errors

    @property
    def digest(self) -> str:
        """Same request and answer: the same turn, whichever trace replays it (a replayed
        answer may have lost its agent's name, so the name is not part of it)."""
        return turn_digest(self.prompt, self.text)


@content_memo
def turn_digest(prompt: str, text: str) -> str:
    """A turn's digest, worked out once per trace for all the monitors that ask."""
    key = "\x1f".join((" ".join(prompt.split()), " ".join(text.split())))
    return hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


def agent_turns(trajectory: Trajectory) -> list[AgentTurn]:
    """The assistant answers this trajectory produced, in order (answers it only received as
    history are left out, so a monitor that restarted does not judge them again); the final
    output when no message has content (dialects that only record the run's output)."""
    fallback = trajectory.agent_names[0] if len(trajectory.agent_names) == 1 else DEFAULT_AGENT
    errors = {c.id for c in trajectory.tool_calls if c.id and c.error}
    turns: list[AgentTurn] = []
    prompt = trajectory.scope.user_request
    calls: list[str] = []
    failed = 0
    for message in trajectory.messages:
        if message.role == "user" and message.content:
            prompt, calls, failed = message.content, [], 0
        elif message.role == "tool":
            failed += message.tool_call_id in errors
        elif message.role == "assistant" and message.replayed:
            calls, failed = [], 0  # an earlier trace's answer: judged when it was new
        elif message.role == "assistant":
            calls.extend(call.name for call in message.tool_calls)
            if message.content.strip():
                turns.append(
                    AgentTurn(
                        agent=message.agent or fallback,
                        prompt=_bounded(prompt),
                        text=_bounded(message.content),
                        span_id=message.span_id,
                        tool_calls=tuple(calls),
                        tool_errors=failed,
                    )
                )
                calls, failed = [], 0
    if not turns and trajectory.final_output and not _replayed(trajectory):
        turns.append(
            AgentTurn(
                agent=fallback,
                prompt=_bounded(prompt),
                text=_bounded(trajectory.final_output),
                span_id=trajectory.final_output_span_id,
                tool_calls=tuple(c.name for c in trajectory.tool_calls),
                tool_errors=sum(1 for c in trajectory.tool_calls if c.error),
            )
        )
    return turns


def _bounded(text: str) -> str:
    if len(text) <= MAX_CHARS:
        return text
    return text[: MAX_CHARS * 3 // 4] + "\n" + text[-(MAX_CHARS // 4) :]


def _replayed(trajectory: Trajectory) -> bool:
    """The final output is an answer the trace only received as history."""
    return any(
        m.replayed and m.content == trajectory.final_output
        for m in trajectory.messages
        if m.role == "assistant"
    )
