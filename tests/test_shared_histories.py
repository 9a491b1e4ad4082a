"""Chat spans that repeat the conversation are read only for what they add, and the trajectory
comes out exactly as if every history had been read whole: the same messages, scope, tool
calls and notes on every span."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan

from otel_safety.mapping import MappedSpan, SharedHistories, map_span
from otel_safety.mapping.assemble import assemble
from otel_safety.mapping.values import MAX_TEXT_CHARS

Dumps = Callable[[Any], str]
SPACED: Dumps = json.dumps
COMPACT: Dumps = lambda value: json.dumps(value, separators=(",", ":"))  # noqa: E731


def _text(role: str, content: str) -> dict[str, Any]:
    return {"role": role, "parts": [{"type": "text", "content": content}]}


def _call(number: int) -> dict[str, Any]:
    arguments = {"path": f"/tmp/report-{number}.txt", "lines": [number, number + 1]}
    part = {"type": "tool_call", "id": f"c{number}", "name": "read_file", "arguments": arguments}
    return {"role": "assistant", "parts": [part]}


def _reply(number: int, content: str | None = None) -> dict[str, Any]:
    response = content if content is not None else f"contents of report {number}"
    part = {"type": "tool_call_response", "id": f"c{number}", "response": response}
    return {"role": "tool", "parts": [part]}


def _trace(span_factory, histories: list[Any], outputs: list[Any] | None = None):
    """One agent run whose chat spans send `histories` (JSON texts or raw values) in order."""
    span_factory.exporter.clear()
    tracer = span_factory.tracer
    attributes = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "helper"}
    with tracer.start_as_current_span("invoke_agent helper", attributes=attributes):
        for number, history in enumerate(histories):
            output = (outputs or [])[number] if outputs else [_call(number)]
            chat = {
                "gen_ai.operation.name": "chat",
                "gen_ai.input.messages": history,
                "gen_ai.output.messages": json.dumps(output),
            }
            with tracer.start_as_current_span("chat model", attributes=chat):
                pass
    return list(span_factory.exporter.get_finished_spans())


def _read(spans: list[ReadableSpan], shared: bool) -> tuple[list[MappedSpan], dict[str, Any]]:
    histories = SharedHistories() if shared else None
    mapped = [m for m in (map_span(s, histories=histories) for s in spans) if m is not None]
    notes = {m.span_id: (list(m.notes), list(m.notes.capped)) for m in mapped}
    trajectory = assemble("t" * 32, mapped)
    assert trajectory is not None
    return mapped, {"trajectory": trajectory.model_dump(), "notes": notes}


def _same_either_way(spans: list[ReadableSpan]) -> list[MappedSpan]:
    mapped, shared = _read(spans, shared=True)
    _, whole = _read(spans, shared=False)
    assert shared == whole
    return mapped


def _growing(turns: int, dumps: Dumps, first: list[dict[str, Any]] | None = None) -> list[str]:
    history = first or [_text("system", "You are a careful assistant."), _text("user", "Sum up.")]
    sent = []
    for number in range(turns):
        sent.append(dumps(history))
        history = [*history, _call(number), _reply(number)]
    return sent


@pytest.mark.parametrize("dumps", [SPACED, COMPACT], ids=["spaced", "compact"])
def test_a_growing_history_is_read_once_and_assembles_the_same(span_factory, dumps):
    mapped = _same_either_way(_trace(span_factory, _growing(6, dumps)))
    chats = sorted((m for m in mapped if m.role == "llm"), key=lambda m: m.start_ns)
    assert chats[0].history_of is None
    for earlier, later in itertools.pairwise(chats):
        assert later.history_of == earlier.span_id
        assert later.history_length == len(earlier.input_messages)
        shared = later.input_messages[: later.history_length]
        assert all(a is b for a, b in zip(shared, earlier.input_messages, strict=True))


def test_two_conversations_interleaved_in_one_trace(span_factory):
    first = _growing(4, SPACED)
    second = _growing(4, COMPACT, [_text("user", "Another task entirely.")])
    interleaved = [history for pair in zip(first, second, strict=True) for history in pair]
    mapped = _same_either_way(_trace(span_factory, interleaved))
    assert sum(m.history_of is not None for m in mapped) == 6


def test_a_capped_message_is_noted_on_every_span_that_repeats_it(span_factory):
    long = [_text("user", "x" * (MAX_TEXT_CHARS + 10))]
    mapped = _same_either_way(_trace(span_factory, _growing(3, SPACED, long)))
    chats = [m for m in mapped if m.role == "llm"]
    assert all(m.notes.capped for m in chats)
    assert sum(m.history_of is not None for m in chats) == 2


def test_damaged_histories_and_retries_read_as_alone(span_factory):
    sent = _growing(5, SPACED)
    histories = [
        sent[0],
        sent[1][:-5],  # cut short: malformed
        sent[1],
        sent[1],  # the same history again (a retry)
        "  " + sent[2] + "\n",
        [json.dumps(_text("user", "structured"))],  # not a JSON text
        sent[3].replace('"Sum up."', '"Sum up, please."'),  # an edited first message
        sent[4][:-1] + ' "stray"]',  # an element that is no message
        sent[4] + "]",  # trailing garbage
    ]
    mapped = _same_either_way(_trace(span_factory, histories))
    assert any(m.notes for m in mapped)
    assert sum(m.history_of is not None for m in mapped) >= 3


def test_repeated_identical_messages_stay_a_multiset(span_factory):
    history = [_text("user", "yes")]
    sent = []
    for _ in range(4):
        sent.append(SPACED(history))
        history = [*history, _text("assistant", "Shall I go on?"), _text("user", "yes")]
    outputs = [[_text("assistant", "Shall I go on?")] for _ in sent]
    _same_either_way(_trace(span_factory, sent, outputs))


def test_a_history_branching_from_an_earlier_span(span_factory):
    sent = _growing(4, SPACED)
    branch = json.loads(sent[1])
    branch.append(_text("user", "Actually, stop here."))
    mapped = _same_either_way(_trace(span_factory, [*sent, SPACED(branch)]))
    assert mapped[-2].history_of is not None  # the branch extends the second history


def test_pydantic_ai_histories_are_read_once():
    """pydantic-ai's own chat spans (a scripted model, one tool call): its second model call
    resends the first's history, which is not parsed again."""
    from instrumented import run_pydantic_ai_agent

    spans = sorted(run_pydantic_ai_agent(), key=lambda span: span.end_time or 0)
    mapped = _same_either_way(spans)
    chats = [m for m in mapped if m.role == "llm"]
    assert len(chats) == 2 and chats[1].history_of == chats[0].span_id
