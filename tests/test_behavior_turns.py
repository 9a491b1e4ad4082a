"""The behaviour monitors' shared bookkeeping: who said what, and each turn counted once."""

from __future__ import annotations

import json

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_safety.behavior.indicators import Indicator, IndicatorType
from otel_safety.behavior.monitor import AgentState, BehaviorMonitor
from otel_safety.behavior.turns import DEFAULT_AGENT, AgentTurn
from otel_safety.detectors.sandbagging import SandbaggingParams
from otel_safety.model import Message, Trajectory
from otel_safety.pipeline import Pipeline


class Counting(BehaviorMonitor[list]):
    """Remembers every turn it is given, per agent; fires on none."""

    key = "sandbagging"  # borrows a packaged data file; never registered
    default_threshold = 0.5
    params_model = SandbaggingParams

    def new_memory(self) -> list:
        return []

    def observe(self, turn: AgentTurn, state: AgentState[list], trace: object) -> list[Indicator]:
        state.memory.append(turn.text)
        return [Indicator(type=IndicatorType.BEHAVIORAL_DRIFT, severity=0.1, evidence=[turn.text])]


def _messages(*pairs: tuple[str, str]) -> str:
    out = []
    for role, text in pairs:
        out.append({"role": role, "parts": [{"type": "text", "content": text}]})
    return json.dumps(out)


def test_a_model_call_under_a_framework_span_keeps_its_agent() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("t")
    with tracer.start_as_current_span("run"):
        for name, answer in (("researcher", "It is 330 metres."), ("writer", "It is 300 m.")):
            attrs = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": name}
            chat = {
                "gen_ai.operation.name": "chat",
                "gen_ai.input.messages": _messages(("user", "How tall is it?")),
                "gen_ai.output.messages": _messages(("assistant", answer)),
            }
            with (
                tracer.start_as_current_span(f"invoke_agent {name}", attributes=attrs),
                tracer.start_as_current_span("handoff step"),  # not a GenAI span
                tracer.start_as_current_span("chat", attributes=chat),
            ):
                pass
    spans = list(exporter.get_finished_spans())
    evaluation = Pipeline(detectors=[Counting()]).evaluate(spans)
    [finding] = evaluation.findings
    assert {a: v["turns"] for a, v in finding.details["agents"].items()} == {
        "researcher": 1,
        "writer": 1,
    }


def _trajectory(trace_id: str, *messages: Message) -> Trajectory:
    return Trajectory(trace_id=trace_id, conversation_id="c", messages=list(messages))


def test_replayed_answers_that_lost_their_agent_are_not_counted_again() -> None:
    monitor = Counting()
    ask = Message(role="user", content="Tell me about the tower")
    first = Message(role="assistant", content="It is 330 metres.", agent="researcher")
    second = Message(role="assistant", content="It is 300 metres.", agent="writer")
    monitor.evaluate(_trajectory("t1", ask, first, second))
    replayed = [m.model_copy(update={"agent": None}) for m in (first, second)]
    more = Message(role="user", content="And Paris?")
    answer = Message(role="assistant", content="Paris is the capital.", agent="researcher")
    finding = monitor.evaluate(_trajectory("t2", ask, *replayed, more, answer))
    assert set(finding.details["agents"]) == {"researcher"}  # no phantom "agent"
    assert finding.details["agents"]["researcher"]["turns"] == 2
    assert finding.details["indicator_counts"] == {"behavioral_drift": 1}


def test_a_history_longer_than_the_memory_is_not_counted_again() -> None:
    monitor = Counting(max_turns=8)
    history: list[Message] = []
    counted = []
    for n in range(30):
        history += [
            Message(role="user", content=f"question {n}"),
            Message(role="assistant", content=f"answer {n}", agent="solo"),
        ]
        finding = monitor.evaluate(_trajectory(f"t{n}", *history))
        counted.append(finding.details["agents"]["solo"]["turns"])
    assert counted == list(range(1, 31))  # one new turn per trace, never the old ones again
    state = monitor.state.peek("conversation:c")
    assert len(state.seen) == 8 and len(state.judged) <= 32


def test_a_huge_answer_is_read_by_its_head_and_tail() -> None:
    monitor = Counting()
    text = "start " + "x" * 200_000 + " end"
    monitor.evaluate(_trajectory("t", Message(role="user", content="go"),
                                 Message(role="assistant", content=text)))  # fmt: skip
    [seen] = monitor.state.peek("conversation:c").agents[DEFAULT_AGENT].memory
    assert len(seen) <= 8_001 and seen.startswith("start") and seen.endswith("end")


def _chat(tracer, history: list[tuple[str, str]], answer: str) -> None:
    attributes = {
        "gen_ai.operation.name": "chat",
        "gen_ai.input.messages": _messages(*history),
        "gen_ai.output.messages": _messages(("assistant", answer)),
    }
    with tracer.start_as_current_span("chat", attributes=attributes):
        pass


def test_an_answer_repeated_word_for_word_is_a_new_turn_each_time() -> None:
    """Same refusal to three questions in one trace, then the same question and answer again
    in a trace of its own: every answer is a turn, judged once."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("t")
    no = "I can't help with that."
    history: list[tuple[str, str]] = []
    with tracer.start_as_current_span("invoke_agent desk", attributes={
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "desk",
        "gen_ai.conversation.id": "c"}):  # fmt: skip
        for question in ("Export my payments?", "Change my email?", "Close my account?"):
            history.append(("user", question))
            _chat(tracer, history, no)
            history.append(("assistant", no))
    first = list(exporter.get_finished_spans())
    exporter.clear()
    with tracer.start_as_current_span("invoke_agent desk", attributes={
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "desk",
        "gen_ai.conversation.id": "c"}):  # fmt: skip
        _chat(tracer, [("user", "Close my account?")], no)
    second = list(exporter.get_finished_spans())
    monitor = Counting()
    pipeline = Pipeline(detectors=[monitor])
    assert pipeline.evaluate(first).findings[0].details["agents"]["desk"]["turns"] == 3
    assert pipeline.evaluate(second).findings[0].details["agents"]["desk"]["turns"] == 4
    assert pipeline.evaluate(second).findings[0].details["agents"]["desk"]["turns"] == 4  # again


def test_a_users_monitor_settings_replace_lists_rather_than_extend_them(tmp_path) -> None:
    from otel_safety.detectors.ethics_boundary import EthicsBoundary

    (tmp_path / "ethics_boundary.toml").write_text(
        'version = 1\n[monitor]\nenabled_checks = ["bias"]\nmode = "active"\n'
    )
    narrowed = EthicsBoundary(data_dir=str(tmp_path))
    assert narrowed.params.enabled_checks == ["bias"] and narrowed.mode == "active"
    assert len(EthicsBoundary().params.enabled_checks) == 5


def test_after_a_restart_the_replayed_history_is_not_judged_again() -> None:
    """A fresh monitor (a restarted sidecar, another instance) gets a trace that carries the
    conversation so far: only the answer this trace produced is a turn."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("t")
    history = [("user", "Plan a trip to Lisbon."), ("assistant", "Day 1: Alfama and Graça.")]
    history += [("user", "And day 2?")]
    with tracer.start_as_current_span("invoke_agent desk", attributes={
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "desk",
        "gen_ai.conversation.id": "c"}):  # fmt: skip
        _chat(tracer, history, "Day 2: Belém and the river front.")
    restarted = Counting()
    [finding] = (
        Pipeline(detectors=[restarted]).evaluate(list(exporter.get_finished_spans())).findings
    )
    assert finding.details["agents"]["desk"]["turns"] == 1
    [only] = restarted.state.peek("conversation:c").agents["desk"].memory
    assert only.startswith("Day 2")
