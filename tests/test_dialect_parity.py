"""Whole agent runs judged alike whichever instrumentation traced them.

Set 1 of our agent runs (`otel_safety/evaluation/agent_runs/set1.jsonl`, 120 labelled runs
in shells, clouds, mailboxes and smart homes) and 150 AgentDojo runs from the shared data
(long ones too, whose flattened histories outgrow the SDK's 128 attributes a span) are
replayed through three real OpenAI-client instrumentations against a local fake server:
opentelemetry-instrumentation-openai-v2, OpenInference and OpenLLMetry. None of them makes a
span for a tool call; the call is seen in the model's answer and its result in the next
model call's history. Set 1 is also replayed with every model call streamed in chunks (the
instrumentation puts the answer and its calls back together), with openai-v2 sending content
as log records only, and run as pydantic-ai agents, which make tool spans. Every run must reach the
escalation level it reaches when written as GenAI `chat` and `execute_tool` spans, except a
run that ends on a tool's result: no model call ever carried that result, so no span of the
client instrumentations holds it.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest
from replay_instrumented import (
    EVENTS,
    STREAM,
    replay,
    replay_pydantic_ai,
    replay_with_events,
    sayable_by_pydantic_ai,
)

from otel_safety.evaluation.cases import Case, SpanWriter
from otel_safety.evaluation.datasets import agentdojo
from otel_safety.model import EscalationLevel
from otel_safety.pipeline import Pipeline

pytestmark = pytest.mark.process

INSTRUMENTATIONS = ["otel_genai", "openinference", "openllmetry"]


@pytest.fixture(scope="module")
def runs() -> list[dict]:
    folder = resources.files("otel_safety.evaluation") / "agent_runs"
    text = (folder / "set1.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def written_levels(runs: list[dict]) -> dict[str, str]:
    """Each run's level from GenAI spans with a span per tool call (`SpanWriter`)."""
    pipeline, writer = Pipeline(), SpanWriter()
    levels = {}
    for run in runs:
        system = "\n".join(m["content"] for m in run["messages"] if m["role"] == "system")
        rest = [m for m in run["messages"] if m["role"] != "system"]
        spans = writer.spans(Case(run["id"], "agent_runs", rest, {}, system=system))
        levels[run["id"]] = pipeline.evaluate(spans).level.name
    return levels


def test_every_run_reaches_the_same_level_with_its_content_in_log_records_only(
    runs: list[dict], written_levels: dict[str, str]
) -> None:
    """openai-v2 with content capture set to EVENT_ONLY: spans without messages, each model
    call's messages in a `gen_ai.client.inference.operation.details` log record."""
    traces = replay_with_events(EVENTS, runs)
    pipeline = Pipeline()
    assert all(events for _, events in traces.values())
    differ = {
        run_id: (written_levels[run_id], level)
        for run_id, (spans, events) in traces.items()
        if (level := pipeline.evaluate(spans, "root_ended", events).level.name)
        != written_levels[run_id]
    }
    assert not differ, f"log records: (written, replayed) levels differ: {differ}"


def test_every_run_reaches_the_same_level_as_a_pydantic_ai_agent(
    runs: list[dict], written_levels: dict[str, str]
) -> None:
    """pydantic-ai makes a span per tool call and sends its own message form."""
    sayable = [run for run in runs if sayable_by_pydantic_ai(run)]
    assert len(sayable) >= 100
    traces = replay_pydantic_ai(sayable)
    pipeline = Pipeline()
    differ = {
        run_id: (written_levels[run_id], level)
        for run_id, spans in traces.items()
        if (level := pipeline.evaluate(spans).level.name) != written_levels[run_id]
    }
    assert not differ, f"pydantic-ai: (written, replayed) levels differ: {differ}"


@pytest.mark.parametrize(
    "instrumentation", INSTRUMENTATIONS + [name + STREAM for name in INSTRUMENTATIONS]
)
def test_every_run_reaches_the_same_level_whichever_instrumentation_traced_it(
    instrumentation: str, runs: list[dict], written_levels: dict[str, str]
) -> None:
    traces = replay(instrumentation, runs)
    assert set(traces) == set(written_levels)
    pipeline = Pipeline()
    differ = {
        run_id: (written_levels[run_id], level)
        for run_id, spans in traces.items()
        if (level := pipeline.evaluate(spans).level.name) != written_levels[run_id]
    }
    assert not differ, f"{instrumentation}: (written, replayed) levels differ: {differ}"
    stopped = sum(
        level in ("SOFT_STOP", "HUMAN_REVIEW", "HARD_STOP") for level in written_levels.values()
    )
    assert stopped >= 40  # the set's unsafe runs are mostly stopped: the comparison means something


AGENTDOJO_RUNS = 150


@pytest.fixture(scope="module")
def agentdojo_runs(shared_data: Path) -> list[Case]:
    cases = list(agentdojo(shared_data))
    random.Random(0).shuffle(cases)
    return cases[:AGENTDOJO_RUNS]


@pytest.mark.parametrize("instrumentation", INSTRUMENTATIONS)
def test_agentdojo_runs_reach_the_same_level_whichever_instrumentation_traced_them(
    instrumentation: str, agentdojo_runs: list[Case]
) -> None:
    pipeline, writer = Pipeline(), SpanWriter()
    written = {case.case_id: pipeline.evaluate(writer.spans(case)).level for case in agentdojo_runs}
    runs = [
        {
            "id": case.case_id,
            "messages": ([{"role": "system", "content": case.system}] if case.system else [])
            + case.messages,
        }
        for case in agentdojo_runs
    ]
    traces = replay(instrumentation, runs)
    pipeline = Pipeline()
    ends_on_a_result = {
        case.case_id for case in agentdojo_runs if case.messages[-1]["role"] == "tool"
    }
    differ = {
        run_id: (written[run_id].name, level.name)
        for run_id, spans in traces.items()
        if (level := pipeline.evaluate(spans).level) != written[run_id]
        and run_id not in ends_on_a_result
    }
    assert not differ, f"{instrumentation}: (written, replayed) levels differ: {differ}"
    stopped = sum(level >= EscalationLevel.SOFT_STOP for level in written.values())
    assert stopped >= 10  # stopped runs are compared too


def test_the_parity_tool_keeps_the_blind_sets_blind() -> None:
    tool = Path(__file__).resolve().parents[1] / "tools" / "dialect_parity.py"
    done = subprocess.run(
        [sys.executable, str(tool), "--sets", "set1,set5"], capture_output=True, text=True
    )
    assert done.returncode == 2 and "set5 stay blind" in done.stderr
