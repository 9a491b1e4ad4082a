"""Judging in a worker process: real provider, real child process, real DuckDB file."""

from __future__ import annotations

import gc
import json
import logging
import os
import signal
import subprocess

import duckdb
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic import ConfigDict, PrivateAttr

from otel_safety import create_processor
from otel_safety import semconv as sc
from otel_safety.config import ConfigError
from otel_safety.detection_worker import (
    COLLECTOR_THRESHOLDS,
    ProcessPipeline,
    span_from_wire,
    span_to_wire,
    tune_collector,
)
from otel_safety.exporters.worker_store import WorkerStore
from otel_safety.model import EscalationLevel, Finding
from otel_safety.pipeline import Pipeline
from otel_safety.policy import SeverityPolicy


def agent_run(provider: TracerProvider, command: str, conversation: str = "c1") -> None:
    tracer = provider.get_tracer("tests")
    with (
        tracer.start_as_current_span(
            "invoke_agent ops",
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": "ops",
                "gen_ai.conversation.id": conversation,
            },
        ),
        tracer.start_as_current_span(
            "execute_tool run_shell",
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "run_shell",
                "gen_ai.tool.call.arguments": json.dumps({"command": command}),
            },
        ),
    ):
        pass


def flagged(exporter: InMemorySpanExporter) -> set[tuple[str, str]]:
    """(command, detector) for every tool span exported with a detector fired on it."""
    return {
        (json.loads(span.attributes["gen_ai.tool.call.arguments"])["command"], detector)
        for span in exporter.get_finished_spans()
        if "gen_ai.tool.call.arguments" in span.attributes
        for detector in span.attributes.get(sc.OTEL_SAFETY_DETECTORS_FIRED, ())
    }


@pytest.fixture
def in_process(tmp_path):
    exporter = InMemorySpanExporter()
    processor = create_processor(
        str(tmp_path / "store.duckdb"), exporters=[exporter], detection="process"
    )
    provider = TracerProvider()
    provider.add_span_processor(processor)
    yield provider, processor.engine, exporter
    provider.shutdown()


def test_spans_travel_to_the_worker_and_back_unchanged(span_factory):
    spans = span_factory.agent_run(answer="done", prompt="list files")
    with span_factory.tracer.start_as_current_span("x") as span:
        span.add_event("e", {"k": "v"}, timestamp=123)
        span.set_status(span.status.__class__(span.status.status_code, None))
    spans += list(span_factory.exporter.get_finished_spans())[-1:]
    for original in spans:
        copy = span_from_wire(span_to_wire(original))
        assert copy.name == original.name
        assert copy.context.span_id == original.context.span_id
        assert copy.context.trace_id == original.context.trace_id
        assert (copy.parent and copy.parent.span_id) == (
            original.parent and original.parent.span_id
        )
        assert dict(copy.attributes) == dict(original.attributes)
        assert [(e.name, dict(e.attributes), e.timestamp) for e in copy.events] == [
            (e.name, dict(e.attributes), e.timestamp) for e in original.events
        ]
        assert copy.resource.attributes == original.resource.attributes
        assert (copy.start_time, copy.end_time) == (original.start_time, original.end_time)
        assert copy.status.status_code == original.status.status_code


class AnnotatedFinding(Finding):
    """A detector's own kind of finding, with extra fields and private state."""

    model_config = ConfigDict(extra="allow")
    _seen: str = PrivateAttr(default="")


def test_findings_and_trajectories_cross_the_pipe_as_they_were(span_factory):
    """What the child sends back (and the store's batches carry) is rebuilt field for field,
    with the fields that were set, and nothing is validated again on the way."""
    import pickle

    spans = span_factory.agent_run(answer="I ran the tests: all pass.", prompt="run the tests")
    evaluation = Pipeline().evaluate(spans)
    assert evaluation.findings and evaluation.trajectory is not None
    sent = (evaluation.findings, evaluation.trajectory)
    findings, trajectory = pickle.loads(pickle.dumps(sent, protocol=pickle.HIGHEST_PROTOCOL))
    assert (findings, trajectory) == sent
    for copy, original in zip(findings, evaluation.findings, strict=True):
        assert type(copy) is Finding
        assert copy.model_fields_set == original.model_fields_set
        assert copy.model_dump_json(exclude_unset=True) == original.model_dump_json(
            exclude_unset=True
        )
    assert (
        trajectory.messages[0].model_fields_set
        == evaluation.trajectory.messages[0].model_fields_set
    )
    odd = Finding.model_construct(detector="x", score="not a number")  # as it was: not checked
    assert pickle.loads(pickle.dumps(odd)).score == "not a number"

    mine = AnnotatedFinding(**evaluation.findings[0].model_dump(), reviewer="ana")
    mine._seen = "twice"
    copy = pickle.loads(pickle.dumps(mine))
    assert copy == mine and copy.reviewer == "ana" and copy._seen == "twice"


def test_the_store_names_only_traces_the_child_still_holds(span_factory):
    """A trace goes to the child's store by reference while the child keeps its batch and
    the engine has not changed it; an older one, one changed since (raised to its run's
    level) or one judged by an earlier child travels whole."""
    from otel_safety.config import Settings
    from otel_safety.detection_worker import ChildCopy, _JudgedBatches

    pipeline = ProcessPipeline(Settings.resolve(environ={}), Pipeline(), writes_store=True)
    evaluation = Pipeline().evaluate(span_factory.agent_run(answer="done", prompt="ls"))
    pipeline._children, pipeline._judge_sent = 2, 5
    held = (evaluation.spans, evaluation.findings, evaluation.trajectory, evaluation.level)
    evaluation.child_copy = ChildCopy(2, 5, 0, *held)
    assert pipeline._store_item(evaluation) == (5, 0)
    pipeline._judge_sent = 5 + _JudgedBatches.KEPT - 1
    assert pipeline._store_item(evaluation) == (5, 0)
    pipeline._judge_sent += 1  # the child has let batch 5 go
    assert isinstance(pipeline._store_item(evaluation), dict)
    pipeline._judge_sent = 5
    evaluation.child_copy = ChildCopy(1, 5, 0, *held)  # judged by the child before this one
    assert isinstance(pipeline._store_item(evaluation), dict)
    evaluation.child_copy = ChildCopy(2, 5, 0, *held)
    evaluation.level = EscalationLevel.HARD_STOP  # raised since
    assert isinstance(pipeline._store_item(evaluation), dict)
    assert pipeline.stored_by_reference == 2


@pytest.mark.process
def test_traces_are_judged_in_a_child_process_and_stored(in_process):
    provider, engine, exporter = in_process
    assert isinstance(engine.pipeline, ProcessPipeline)
    agent_run(provider, "rm -rf /")
    agent_run(provider, "ls docs")
    assert provider.force_flush(120_000)
    child = engine.pipeline._child
    assert child is not None and child.poll() is None and child.pid != os.getpid()
    assert not engine.pipeline.in_process
    found = flagged(exporter)
    assert ("rm -rf /", "tool_guard") in found
    assert not any(command == "ls docs" for command, _ in found)
    store = next(sink for sink in engine.sinks if isinstance(sink, WorkerStore))
    assert engine.pipeline.store_written > 0  # the child wrote the store ...
    provider.shutdown()
    assert store.written_here == 0  # ... and this process did not
    with duckdb.connect(store.path, read_only=True) as connection:
        fired = connection.execute("SELECT DISTINCT detector FROM findings WHERE detected")
        assert ("tool_guard",) in fired.fetchall()


@pytest.mark.process
def test_spans_queued_while_the_detection_process_starts_are_parked_and_all_judged(in_process):
    provider, engine, exporter = in_process
    # Parking starts a batch behind. With the default 512, whether 512 items pile up before
    # the child is ready depends on the machine's speed (a CI run once had none parked); 16
    # pile up within the first runs, long before a child has built its detectors.
    engine._batch_size = 16
    commands = [f"rm -rf /home/user{n}" if n % 10 == 0 else f"ls docs-{n}" for n in range(300)]
    for number, command in enumerate(commands):  # the child still builds its detectors
        agent_run(provider, command, conversation=f"c{number}")
    assert provider.force_flush(120_000)
    assert engine.stats["spans_parked"] > 0
    exported = exporter.get_finished_spans()
    assert len(exported) == 2 * len(commands)  # every span once
    assert engine.stats["spans_evaluated"] == 2 * len(commands)
    guarded = {command for command, detector in flagged(exporter) if detector == "tool_guard"}
    assert guarded == set(commands[::10])


@pytest.mark.process
def test_the_child_stops_with_the_engine(tmp_path):
    processor = create_processor(str(tmp_path / "s.duckdb"), otlp=False, detection="process")
    provider = TracerProvider()
    provider.add_span_processor(processor)
    agent_run(provider, "rm -rf /")
    assert provider.force_flush(120_000)
    child = processor.engine.pipeline._child
    assert child is not None
    provider.shutdown()
    assert child.wait(timeout=30) is not None


@pytest.mark.process
def test_starting_the_child_does_not_wait_for_its_detectors(tmp_path):
    """Start-up only launches the child; the first batch waits for it to be ready, so a
    shutdown with nothing judged never waits for the detectors to compile."""
    from otel_safety.config import Settings

    settings = Settings.resolve(environ={}, db_path=str(tmp_path / "s.duckdb"))
    pipeline = ProcessPipeline(settings, Pipeline(detectors=[]))
    pipeline.warm()
    child = pipeline._child
    assert child is not None and child.poll() is None and not pipeline._ready
    pipeline.close()
    assert child.poll() is not None  # stopped, not left compiling
    assert not pipeline.in_process  # closing is not a failure


@pytest.mark.process
@pytest.mark.skipif(not hasattr(os, "getpriority"), reason="no nice levels on this system")
@pytest.mark.parametrize("steps", [10, 0])
def test_the_detection_process_runs_below_the_app_by_its_nice_setting(tmp_path, steps):
    """On a machine with fewer free cores than busy threads, the app's threads must win them:
    judging runs `detection_nice` levels below the process that started it."""
    from otel_safety.config import Settings

    settings = Settings.resolve(
        environ={"OTEL_SAFETY_DETECTION_NICE": str(steps)}, db_path=str(tmp_path / "s.duckdb")
    )
    pipeline = ProcessPipeline(settings, Pipeline(detectors=[]))
    try:
        assert pipeline.build_error() is None  # the child is ready: it read its settings
        child = pipeline._child
        assert child is not None
        ours = os.getpriority(os.PRIO_PROCESS, 0)
        assert os.getpriority(os.PRIO_PROCESS, child.pid) == min(19, ours + steps)
    finally:
        pipeline.close()


def test_a_detection_nice_outside_the_systems_levels_is_refused():
    from otel_safety.config import Settings

    with pytest.raises(ConfigError, match="OTEL_SAFETY_DETECTION_NICE"):
        Settings.resolve(environ={"OTEL_SAFETY_DETECTION_NICE": "25"})


@pytest.mark.process
def test_a_killed_child_falls_back_to_judging_here_without_losing_traces(in_process, caplog):
    provider, engine, exporter = in_process
    agent_run(provider, "ls")
    assert provider.force_flush(120_000)
    child = engine.pipeline._child
    os.kill(child.pid, signal.SIGKILL)
    child.wait(timeout=30)
    with caplog.at_level(logging.ERROR, logger="otel_safety.detection_worker"):
        agent_run(provider, "rm -rf /")
        assert provider.force_flush(120_000)
    assert engine.pipeline.in_process
    assert ("rm -rf /", "tool_guard") in flagged(exporter)
    assert any("judging in the application's process" in r.message for r in caplog.records)


@pytest.mark.process
def test_ctrl_c_reaching_the_child_leaves_it_judging_for_the_app(in_process):
    """A terminal's Ctrl-C reaches every process of the app's group: the child died with a
    KeyboardInterrupt traceback, and the app said the detection process failed. The app
    decides what Ctrl-C means; the child ignores it and judges on."""
    provider, engine, exporter = in_process
    agent_run(provider, "ls")
    assert provider.force_flush(120_000)
    child = engine.pipeline._child
    os.kill(child.pid, signal.SIGINT)
    with pytest.raises(subprocess.TimeoutExpired):
        child.wait(timeout=1)
    agent_run(provider, "rm -rf /")
    assert provider.force_flush(120_000)
    assert not engine.pipeline.in_process
    assert ("rm -rf /", "tool_guard") in flagged(exporter)


def test_bad_settings_fail_when_the_processor_is_made_not_in_the_child(tmp_path):
    with pytest.raises(ValueError, match="unknown detector"):
        create_processor(str(tmp_path / "s.duckdb"), detectors=["nope"], detection="process")
    with pytest.raises(ConfigError, match=r"detection \(as given\)"):
        create_processor(str(tmp_path / "s.duckdb"), detection="elsewhere")


def test_a_policy_object_keeps_judging_in_this_process(tmp_path):
    processor = create_processor(
        str(tmp_path / "s.duckdb"), otlp=False, policy=SeverityPolicy(), detection="process"
    )
    try:
        assert isinstance(processor.engine.pipeline, Pipeline)
    finally:
        processor.shutdown()


def test_a_judging_process_freezes_what_it_built_and_collects_young_objects_less_often():
    defaults = gc.get_threshold()
    try:
        tune_collector()
        assert gc.get_threshold() == COLLECTOR_THRESHOLDS
        assert gc.get_freeze_count() > 0  # everything alive now, the modules' data included
        assert COLLECTOR_THRESHOLDS[0] > defaults[0]
    finally:
        gc.unfreeze()
        gc.set_threshold(*defaults)


@pytest.mark.process
def test_a_detector_whose_data_does_not_compile_is_left_out_and_the_child_judges_on(
    tmp_path, caplog, monkeypatch
):
    """An app keeps judging in the worker process without that one detector: one typo in a
    data file must not move every detector onto the app's GIL. (A command stops on it.)"""
    data = tmp_path / "data"
    data.mkdir()
    (data / "injection.toml").write_text(
        'version = 1\n[[rules]]\nid = "broken"\ncategory = "task_hijack"\nweight = 0.5\n'
        "pattern = '(unclosed'\n"
    )
    monkeypatch.setenv("OTEL_SAFETY_DATA_DIR", str(data))
    exporter = InMemorySpanExporter()
    processor = create_processor(
        str(tmp_path / "s.duckdb"), exporters=[exporter], detection="process"
    )
    provider = TracerProvider()
    provider.add_span_processor(processor)
    try:
        with caplog.at_level(logging.ERROR, logger="otel_safety.detection_worker"):
            agent_run(provider, "rm -rf /")
            assert provider.force_flush(120_000)
        pipeline = processor.engine.pipeline
        assert not pipeline.in_process and pipeline._child is not None
        assert ("rm -rf /", "tool_guard") in flagged(exporter)
        assert "injection" not in {key for key, _ in pipeline.in_force()}
        assert "broken" in pipeline.build_error()  # what a command stops on
        assert any("the other detectors judge on without it" in r.message for r in caplog.records)
    finally:
        provider.shutdown()
