"""A pydantic-ai run's messages read as the monitors read a trace: the answer just given as
an `AgentTurn`, and the run so far as a `Trajectory` (its user inputs, tool calls and tool
results, which the monitors check citations and disclosures against)."""

from __future__ import annotations

import json
import uuid
from typing import Any

from opentelemetry import trace

from otel_safety.behavior.turns import DEFAULT_AGENT, AgentTurn
from otel_safety.model import Message, ToolCall, Trajectory

__all__ = ["answer_turn", "run_trajectory"]


def answer_turn(ctx: Any, response: Any) -> AgentTurn | None:
    """The text of `response` as one turn of the run's agent, with the request it answers
    (the latest user prompt) and the tools called since; None when it has no text."""
    from pydantic_ai.messages import TextPart, ToolCallPart

    text = "".join(p.content for p in response.parts if isinstance(p, TextPart)).strip()
    if not text:
        return None
    prompt, calls, errors = _since_last_prompt(ctx.messages)
    calls += [p.tool_name for p in response.parts if isinstance(p, ToolCallPart)]
    agent = getattr(getattr(ctx, "agent", None), "name", None) or DEFAULT_AGENT
    return AgentTurn(
        agent=agent,
        prompt=prompt,
        text=text,
        span_id=None,
        tool_calls=tuple(calls),
        tool_errors=errors,
    )


def run_trajectory(ctx: Any, conversation: str | None) -> Trajectory:
    """The run's messages so far as a trajectory of the conversation."""
    from pydantic_ai.messages import (
        ModelRequest,
        ModelResponse,
        RetryPromptPart,
        SystemPromptPart,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
        UserPromptPart,
    )

    messages: list[Message] = []
    calls: dict[str, ToolCall] = {}
    for message in ctx.messages:
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, UserPromptPart):
                    messages.append(Message(role="user", content=_text(part.content)))
                elif isinstance(part, SystemPromptPart):
                    messages.append(Message(role="system", content=part.content))
                elif isinstance(part, ToolReturnPart | RetryPromptPart):
                    content = _text(part.content)
                    error = isinstance(part, RetryPromptPart)
                    messages.append(
                        Message(role="tool", content=content, tool_call_id=part.tool_call_id)
                    )
                    if (call := calls.get(part.tool_call_id)) is not None:
                        call.error, call.result = (content, None) if error else (None, content)
        elif isinstance(message, ModelResponse):
            text = "".join(p.content for p in message.parts if isinstance(p, TextPart))
            made = [
                ToolCall(id=p.tool_call_id, name=p.tool_name, arguments=p.args_as_dict())
                for p in message.parts
                if isinstance(p, ToolCallPart)
            ]
            calls.update({call.id: call for call in made if call.id})
            messages.append(Message(role="assistant", content=text, tool_calls=made))
    return Trajectory(
        trace_id=_trace_id(getattr(ctx, "run_id", None)),
        conversation_id=conversation,
        messages=messages,
        tool_calls=list(calls.values()),
    )


def _since_last_prompt(history: list[Any]) -> tuple[str, list[str], int]:
    """The latest user prompt, and the tool calls and failed tool calls after it."""
    from pydantic_ai.messages import (
        ModelRequest,
        ModelResponse,
        RetryPromptPart,
        ToolCallPart,
        UserPromptPart,
    )

    prompt, calls, errors = "", [], 0
    for message in history:
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, UserPromptPart):
                    prompt, calls, errors = _text(part.content), [], 0
                elif isinstance(part, RetryPromptPart) and part.tool_name:
                    errors += 1
        elif isinstance(message, ModelResponse):
            calls += [p.tool_name for p in message.parts if isinstance(p, ToolCallPart)]
    return prompt, calls, errors


def _text(content: Any) -> str:
    """A prompt or tool result as text (multi-part prompts: their text parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list | tuple):
        return "\n".join(item for item in content if isinstance(item, str))
    try:
        return json.dumps(content, default=str)
    except (TypeError, ValueError):
        return str(content)


def _trace_id(run_id: str | None) -> str:
    """The trace the run is recorded in (the current span's), so the turn's findings name
    it; else the run id (a UUID) as 32 hex; else a fresh id."""
    context = trace.get_current_span().get_span_context()
    if context.is_valid:
        return format(context.trace_id, "032x")
    cleaned = (run_id or "").replace("-", "").lower()
    if len(cleaned) == 32 and all(c in "0123456789abcdef" for c in cleaned):
        return cleaned
    return uuid.uuid4().hex
