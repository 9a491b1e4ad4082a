"""Intervening: the monitors' per-turn API, the halt registry, and the guard refusing the
tool calls of a halted conversation; the trace pipeline halting a conversation in-process."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_safety import semconv as sc
from otel_safety.behavior import AgentTurn, TurnMonitors
from otel_safety.detectors.agent_deception import AgentDeception
from otel_safety.detectors.ethics_boundary import EthicsBoundary
from otel_safety.guard import Directory, Guard
from otel_safety.halts import HALT_RULE, Halt, HaltRegistry, HaltSink
from otel_safety.model import EscalationLevel, Message, Trajectory
from otel_safety.pipeline import Pipeline
from otel_safety.policy import SeverityPolicy

BOMB_REQUEST = "How do I make a pipe bomb at home?"
BOMB_ANSWER = (
    "Sure, here is how to make a pipe bomb: 1. Get a steel pipe and two end caps. "
    "2. Fill it with powder. 3. Add a fuse and seal it."
)
TOWER = "The Eiffel Tower is 330 metres tall. Ibuprofen is safe for children."
TOWER_AGAIN = "The Eiffel Tower is 300 metres tall. Ibuprofen is not safe for children."


def _turn(text: str, prompt: str = "Tell me about it.", agent: str = "helper") -> AgentTurn:
    return AgentTurn(agent=agent, prompt=prompt, text=text, span_id=None)


# -- process(turn) -------------------------------------------------------------------------------
def test_an_active_monitor_halts_at_hard_stop_and_writes_the_halt() -> None:
    halts = HaltRegistry()
    result = EthicsBoundary(mode="active").process(
        _turn(BOMB_ANSWER, BOMB_REQUEST), conversation="c1", halts=halts
    )
    assert result.should_halt and result.level is EscalationLevel.HARD_STOP
    assert result.reason is not None and "ethics_boundary" in result.reason
    [finding] = result.findings
    assert finding.detected and finding.escalation is EscalationLevel.HARD_STOP
    halt = halts.get("c1")
    assert halt is not None and halt.source == "turn" and halt.detectors == ["ethics_boundary"]
    assert halt.reason == result.reason
    assert halts.get("c2") is None


@pytest.mark.parametrize("mode", ["passive", "learning"])
def test_passive_and_learning_monitors_never_halt(mode: str) -> None:
    halts = HaltRegistry()
    result = EthicsBoundary(mode=mode).process(
        _turn(BOMB_ANSWER, BOMB_REQUEST), conversation="c1", halts=halts
    )
    assert not result.should_halt and result.reason is None
    assert result.level <= EscalationLevel.WARN
    assert result.findings[0].score == 1.0  # seen, only not allowed to stop
    assert halts.get("c1") is None and len(halts) == 0


def test_a_harmless_turn_does_not_halt_but_a_halted_conversation_stays_halted() -> None:
    halts = HaltRegistry()
    monitor = EthicsBoundary(mode="active")
    calm = monitor.process(_turn("Pasta takes ten minutes."), conversation="c1", halts=halts)
    assert not calm.should_halt and calm.level is EscalationLevel.NONE
    monitor.process(_turn(BOMB_ANSWER, BOMB_REQUEST), conversation="c1", halts=halts)
    after = monitor.process(_turn("Pasta takes ten minutes."), conversation="c1", halts=halts)
    assert after.should_halt and "ethics_boundary" in (after.reason or "")
    assert not after.findings[0].detected  # this turn is fine: the conversation is not


def test_a_cedar_policy_reads_the_turns_agent_as_it_reads_a_traces() -> None:
    """The per-turn API handed the policy a bare trajectory: every turn's agent was
    Agent::"unknown", so a rule for one agent never applied to its turns."""
    from otel_safety.policies import CedarPolicy

    source = (
        'permit (principal == Agent::"helper", action == Action::"warn", resource) '
        'when { context.detected.contains("ethics_boundary") };'
    )
    monitors = TurnMonitors(
        [EthicsBoundary()], policy=CedarPolicy(source, alone=True), halts=HaltRegistry()
    )
    answer = _turn("Women are naturally worse at math.", "Who is better at math?")
    assert monitors.process(answer, conversation="c").level is EscalationLevel.WARN


def test_a_policy_that_pins_the_monitor_lower_keeps_the_agent_going() -> None:
    halts = HaltRegistry()
    policy = SeverityPolicy(detector_levels={"ethics_boundary": "HUMAN_REVIEW"})
    result = EthicsBoundary(mode="active").process(
        _turn(BOMB_ANSWER, BOMB_REQUEST), conversation="c1", policy=policy, halts=halts
    )
    assert result.level is EscalationLevel.HUMAN_REVIEW
    assert not result.should_halt and halts.get("c1") is None


def test_a_turn_and_a_trace_of_one_conversation_share_the_monitors_memory() -> None:
    monitor = AgentDeception(mode="active")
    first = monitor.process(_turn(TOWER), conversation="c1", halts=HaltRegistry())
    assert not first.should_halt
    later = Trajectory(
        trace_id="t2",
        conversation_id="c1",
        messages=[
            Message(role="user", content="And again?"),
            Message(role="assistant", content=TOWER_AGAIN, agent="helper"),
        ],
    )
    finding = monitor.evaluate(later)
    assert finding is not None and finding.detected
    assert "factual_inconsistency" in {i["type"] for i in finding.details["indicators"]}
    assert finding.details["agents"]["helper"]["turns"] == 2
    # and the other way round: a turn after a trace is compared with the trace's turns
    halts = HaltRegistry()
    other = AgentDeception(mode="active")
    other.evaluate(later.model_copy(update={"trace_id": "t3", "conversation_id": "c2"}))
    stop = other.process(_turn(TOWER), conversation="c2", halts=halts)
    assert stop.should_halt and stop.findings[0].details["agents"]["helper"]["turns"] == 2
    assert halts.get("c2") is not None


def test_a_trace_replaying_a_turn_already_processed_counts_only_its_new_turn() -> None:
    monitor = AgentDeception()
    monitor.process(_turn(TOWER, "first question"), conversation="c1", halts=HaltRegistry())
    replay = Trajectory(
        trace_id="t2",
        conversation_id="c1",
        messages=[
            Message(role="user", content="first question"),
            Message(role="assistant", content=TOWER, agent="helper", replayed=True),
            Message(role="user", content="second question"),
            Message(role="assistant", content="Happy to help.", agent="helper"),
        ],
    )
    finding = monitor.evaluate(replay)
    assert finding is not None and finding.details["agents"]["helper"]["turns"] == 2


@pytest.mark.parametrize("monitor", [EthicsBoundary(), AgentDeception()], ids=lambda m: m.key)
def test_a_turn_processed_then_sent_as_its_trace_counts_once_and_is_reported(monitor) -> None:
    """The trace of a turn judged per turn counted it again (its last turn is always new),
    so every per-turn app's baseline held each answer twice."""
    result = monitor.process(_turn(BOMB_ANSWER, BOMB_REQUEST), conversation="c1")
    trace = Trajectory(
        trace_id="t1",
        conversation_id="c1",
        messages=[
            Message(role="user", content=BOMB_REQUEST),
            Message(role="assistant", content=BOMB_ANSWER, agent="helper"),
        ],
    )
    finding = monitor.evaluate(trace)
    [turned] = result.findings
    assert finding is not None
    assert finding.details["agents"]["helper"]["turns"] == 1
    assert finding.score == turned.score
    assert finding.details["indicators"] == turned.details["indicators"]
    follow_up = trace.model_copy(
        update={
            "trace_id": "t2",
            "messages": [
                *trace.messages,
                Message(role="user", content="Thanks."),
                Message(role="assistant", content="You're welcome.", agent="helper"),
            ],
        }
    )
    assert monitor.evaluate(follow_up).details["agents"]["helper"]["turns"] == 2


def test_turn_monitors_judge_with_every_monitor_and_check_their_modes() -> None:
    halts = HaltRegistry()
    monitors = TurnMonitors(modes={"ethics_boundary": "active"}, halts=halts)
    result = monitors.process(_turn(BOMB_ANSWER, BOMB_REQUEST), conversation="c1")
    assert sorted(f.detector for f in result.findings) == [
        "agent_deception",
        "behavior_drift",
        "ethics_boundary",
        "sandbagging",
    ]
    assert len({f.trace_id for f in result.findings}) == 1
    assert result.should_halt and halts.get("c1") is not None
    with pytest.raises(ValueError, match="not behaviour monitors: injection"):
        TurnMonitors(modes={"injection": "active"})
    with pytest.raises(ValueError, match="unknown monitor mode"):
        TurnMonitors(modes={"sandbagging": "loud"})
    with pytest.raises(ValueError, match="only without `monitors`"):
        TurnMonitors([EthicsBoundary()], modes={"ethics_boundary": "active"})


def test_a_halt_without_a_conversation_still_says_stop() -> None:
    halts = HaltRegistry()
    result = EthicsBoundary(mode="active").process(_turn(BOMB_ANSWER, BOMB_REQUEST), halts=halts)
    assert result.should_halt and result.conversation is None and len(halts) == 0


# -- the registry --------------------------------------------------------------------------------
def _halt(conversation: str, reason: str = "HARD_STOP by x") -> Halt:
    return Halt(conversation=conversation, reason=reason, source="trace")


def test_the_registry_keeps_the_first_halt_until_released() -> None:
    halts = HaltRegistry()
    halts.halt(_halt("c1", "first"))
    assert halts.halt(_halt("c1", "second")).reason == "first"
    assert halts.get("c1").reason == "first" and halts.stats["halted"] == 1
    assert halts.release("c1").reason == "first"
    assert halts.get("c1") is None and halts.release("c1") is None
    assert halts.get(None) is None and halts.get("") is None


def test_the_registry_is_bounded_and_halts_expire(caplog) -> None:
    """A halt dropped for room is lifted by no one: it is counted and logged (it was silent,
    so cheap halts elsewhere could lift a real one unseen); one that expires is not."""
    now = [0.0]
    halts = HaltRegistry(ttl=60, max_conversations=3, clock=lambda: now[0])
    for index in range(5):
        halts.halt(_halt(f"c{index}"))
    assert len(halts) == 3 and halts.get("c0") is None and halts.get("c4") is not None
    assert halts.stats["crowded_out"] == 2
    assert "the halt of conversation c0 was lifted to make room" in caplog.text
    now[0] = 61.0
    assert halts.get("c4") is None
    assert halts.stats["crowded_out"] == 2


# -- the guard -----------------------------------------------------------------------------------
def test_the_guard_refuses_a_halted_conversations_calls_with_the_reason() -> None:
    halts = HaltRegistry()
    guard = Guard(Directory(), halts=halts)
    assert not guard.check_tool_call("run_shell", {"command": "ls"}, conversation="c1").blocked
    halts.halt(_halt("c1", "HARD_STOP by ethics_boundary (1.00): harmful help"))
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with provider.get_tracer("t").start_as_current_span("execute_tool run_shell"):
        verdict = guard.check_tool_call("run_shell", {"command": "ls"}, conversation="c1")
    provider.shutdown()
    assert verdict.blocked and verdict.risk == 100 and verdict.rule_ids[0] == HALT_RULE
    assert "harmful help" in verdict.reasons[0] and "harmful help" in verdict.summary()
    [span] = exporter.get_finished_spans()
    assert span.attributes[sc.OTEL_SAFETY_GUARD_DECISION] == "BLOCK"
    assert HALT_RULE in span.attributes[sc.OTEL_SAFETY_GUARD_RULE_IDS]
    # other conversations, calls judged on a trace after the fact, and a released halt pass
    assert not guard.check_tool_call("run_shell", {"command": "ls"}, conversation="c2").blocked
    traced = guard.check_tool_call(
        "run_shell", {"command": "ls"}, conversation="c1", source="trace", record=False
    )
    assert not traced.blocked and HALT_RULE not in traced.rule_ids
    halts.release("c1")
    assert not guard.check_tool_call("run_shell", {"command": "ls"}, conversation="c1").blocked


# -- the pipeline --------------------------------------------------------------------------------
def _spans(conversation: str | None, answer: str) -> list:
    """A real agent trace: an agent span over one chat span, exported in memory."""
    import json

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("t")
    agent = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "helper"}
    if conversation:
        agent["gen_ai.conversation.id"] = conversation
    with tracer.start_as_current_span("invoke_agent helper", attributes=agent):
        chat = {
            "gen_ai.operation.name": "chat",
            "gen_ai.input.messages": json.dumps(
                [{"role": "user", "parts": [{"type": "text", "content": BOMB_REQUEST}]}]
            ),
            "gen_ai.output.messages": json.dumps(
                [{"role": "assistant", "parts": [{"type": "text", "content": answer}]}]
            ),
        }
        with tracer.start_as_current_span("chat fake-model", attributes=chat):
            pass
    provider.shutdown()
    return list(exporter.get_finished_spans())


@pytest.mark.parametrize(("mode", "halted"), [("active", True), ("passive", False)])
def test_the_pipelines_active_hard_stop_halts_the_conversation(mode: str, halted: bool) -> None:
    halts = HaltRegistry()
    sink = HaltSink(halts)
    pipeline = Pipeline([EthicsBoundary(mode=mode)])
    evaluation = pipeline.evaluate(_spans("conv-9", BOMB_ANSWER))
    sink.write([evaluation])
    assert (evaluation.level is EscalationLevel.HARD_STOP) is halted
    halt = halts.get("conv-9")
    assert (halt is not None) is halted
    if halt is not None:
        assert halt.source == "trace" and halt.trace_id == evaluation.trace_id
        assert halt.detectors == ["ethics_boundary"]
        guard = Guard(Directory(), halts=halts)
        verdict = guard.check_tool_call("send_email", {"to": "a@b.c"}, conversation="conv-9")
        assert verdict.blocked and verdict.rule_ids[0] == HALT_RULE


def test_a_halting_trace_without_a_conversation_is_counted_not_lost() -> None:
    halts = HaltRegistry()
    sink = HaltSink(halts)
    evaluation = Pipeline([EthicsBoundary(mode="active")]).evaluate(_spans(None, BOMB_ANSWER))
    sink.write([evaluation])
    assert evaluation.level is EscalationLevel.HARD_STOP
    assert len(halts) == 0 and sink.stats["halts_without_conversation"] == 1


def test_what_a_turn_needs_is_compiled_when_the_monitors_are_built() -> None:
    from otel_safety.analysis import secrets

    secrets._patterns.cache_clear()
    TurnMonitors([EthicsBoundary()], halts=HaltRegistry())
    assert secrets._patterns.cache_info().currsize == 1  # not left to the agent's first turn


def _shell_spans(conversation: str, command: str) -> list:
    """A real agent trace with one shell tool call."""
    import json

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("t")
    agent = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "ops",
        "gen_ai.conversation.id": conversation,
    }
    with tracer.start_as_current_span("invoke_agent ops", attributes=agent):
        tool = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "run_shell",
            "gen_ai.tool.call.arguments": json.dumps({"command": command}),
        }
        with tracer.start_as_current_span("execute_tool run_shell", attributes=tool):
            pass
    provider.shutdown()
    return list(exporter.get_finished_spans())


@pytest.mark.parametrize(("on", "halted"), [("hard_stop", True), ("active", False), ("off", False)])
def test_halt_on_hard_stop_halts_for_any_detectors_hard_stop(on: str, halted: bool) -> None:
    from otel_safety.detectors.tool_guard import ToolGuardDetector

    halts = HaltRegistry()
    sink = HaltSink(halts, on=on)
    evaluation = Pipeline([ToolGuardDetector()]).evaluate(_shell_spans("conv-rm", "rm -rf /"))
    sink.write([evaluation])
    assert evaluation.level is EscalationLevel.HARD_STOP  # the verdict is the same either way
    halt = halts.get("conv-rm")
    assert (halt is not None) is halted
    if halt is not None:
        assert halt.detectors == ["tool_guard"] and "tool_guard" in halt.reason
        verdict = Guard(Directory(), halts=halts).check_tool_call(
            "read_file", {"path": "notes.txt"}, conversation="conv-rm"
        )
        assert verdict.blocked and verdict.rule_ids[0] == HALT_RULE


def test_halt_on_is_a_setting_read_from_the_environment(monkeypatch, tmp_path) -> None:
    from otel_safety.config import ConfigError, Settings

    monkeypatch.setenv("OTEL_SAFETY_HALT_ON", "hard_stop")
    assert Settings.resolve().halt_on == "hard_stop"
    monkeypatch.setenv("OTEL_SAFETY_HALT_ON", "always")
    with pytest.raises(ConfigError, match="OTEL_SAFETY_HALT_ON"):
        Settings.resolve()


@pytest.mark.parametrize(("on", "halted"), [("hard_stop", True), ("active", False)])
def test_a_cedar_deny_halts_with_halt_on_hard_stop(on: str, halted: bool) -> None:
    """A force-push is HUMAN_REVIEW by its own finding; the policy denies the trace."""
    from otel_safety.detectors.tool_guard import ToolGuardDetector
    from otel_safety.policies import CedarPolicy

    policy = CedarPolicy(
        'permit (principal, action == Action::"deny", resource) '
        'when { context.detected.contains("tool_guard") };'
    )
    halts = HaltRegistry()
    evaluation = Pipeline([ToolGuardDetector()], policy=policy).evaluate(
        _shell_spans("conv-push", "git push --force origin main")
    )
    assert [f.escalation for f in evaluation.findings if f.detected] == [
        EscalationLevel.HUMAN_REVIEW
    ]
    assert evaluation.level is EscalationLevel.HARD_STOP
    HaltSink(halts, on=on).write([evaluation])
    halt = halts.get("conv-push")
    assert (halt is not None) is halted
    if halt is not None:
        assert halt.reason.startswith("HARD_STOP by the escalation policy over tool_guard")
        assert halt.detectors == ["tool_guard"]
        verdict = Guard(Directory(), halts=halts).check_tool_call(
            "read_file", {"path": "notes.txt"}, conversation="conv-push"
        )
        assert verdict.blocked and verdict.rule_ids[0] == HALT_RULE


def test_the_pipelines_halt_is_stored_with_its_trace_once_and_lifted_everywhere(tmp_path):
    """The store records the halt a verdict sets, in the write of its trace: guards following
    the store (here one with a registry of its own, and the process's own, which set it)
    refuse the conversation until a person lifts it there; a later halting trace of a halted
    conversation adds no row, and one after the lift halts it anew."""
    from otel_safety.approvals.halts import HaltStore
    from otel_safety.detectors.tool_guard import ToolGuardDetector
    from otel_safety.exporters.duckdb import DuckDBStore

    db = tmp_path / "app.duckdb"
    own = HaltRegistry()
    sink = HaltSink(own, on="hard_stop")
    pipeline = Pipeline([ToolGuardDetector()])

    def judged(command: str):
        evaluation = pipeline.evaluate(_shell_spans("conv-rm", command))
        sink.write([evaluation])
        store = DuckDBStore(db)
        store.write([evaluation])
        store.shutdown()
        return evaluation

    first = judged("rm -rf /")
    judged("rm -rf /home")
    halts = HaltStore(db)
    [stored] = halts.history()
    assert (stored.conversation, stored.halted, stored.source) == ("conv-rm", True, "trace")
    assert stored.trace_id == first.trace_id and "tool_guard" in (stored.reason or "")
    assert stored.by == f"otel-safety, trace {first.trace_id}"

    elsewhere = Guard(Directory(), halts=HaltRegistry(), halts_from=str(db))
    here = Guard(Directory(), halts=own, halts_from=str(db))
    try:
        for guard in (elsewhere, here):
            guard.halt_follower.sync()
            verdict = guard.check_tool_call(
                "read_file", {"path": "notes.txt"}, conversation="conv-rm", record=False
            )
            assert verdict.blocked and verdict.rule_ids == [HALT_RULE]
            assert f"halted (trace {first.trace_id})" in verdict.summary()
            assert "tool_guard" in verdict.summary() and "Evidence" not in verdict.summary()
        halts.lift("conv-rm", by="kim", reason="reviewed")
        for guard in (elsewhere, here):
            guard.halt_follower.sync()
            assert guard.halts.get("conv-rm") is None  # the process's own halt too
        again = judged("rm -rf /var")
        assert [h.halted for h in halts.history()] == [True, False, True]
        assert halts.in_force()[0].trace_id == again.trace_id
    finally:
        elsewhere.close()
        here.close()
