"""Drop-in setup: settings precedence, and a real OTLP exporter to a real receiver on loopback."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from instrumented import TOOL_ARGUMENTS, run_pydantic_ai_agent, run_shell
from loopback import LoopbackServer, QuietHandler
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from pydantic_ai import Agent
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import FunctionModel

import otel_safety
from otel_safety import semconv as sc
from otel_safety.analysis import memo
from otel_safety.bootstrap import build_pipeline
from otel_safety.config import ConfigError, Settings
from otel_safety.exporters.duckdb import StoreError
from otel_safety.integrations.pydantic_ai import instrumentation
from otel_safety.otlp import spans_from_request


class OtlpHttpReceiver(LoopbackServer):
    """A minimal OTLP/HTTP trace receiver: accepts protobuf POSTs on /v1/traces."""

    def __init__(self) -> None:
        self.requests: list[ExportTraceServiceRequest] = []
        received = self.requests

        class Handler(QuietHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                received.append(request)
                reply = ExportTraceServiceResponse().SerializeToString()
                self.reply(reply, "application/x-protobuf")

        super().__init__(Handler)


def _destructive_agent(provider) -> Agent:
    def script(messages, info):
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("run_shell", TOOL_ARGUMENTS)])
        return ModelResponse(parts=[TextPart("Summary done.")])

    return Agent(
        FunctionModel(script), name="readme-bot", tools=[run_shell], **instrumentation(provider)
    )


@pytest.mark.process
def test_configure_stores_and_exports_annotated_spans_over_otlp(tmp_path, monkeypatch):
    db = tmp_path / "app.duckdb"
    with OtlpHttpReceiver() as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
        provider = otel_safety.configure(str(db), service_name="svc", install=False)
        _destructive_agent(provider).run_sync("Summarize the README")
        provider.shutdown()
        spans = [s for r in receiver.requests for s in spans_from_request(r)]
    by_name = {s.name: s for s in spans}
    tool = by_name["execute_tool run_shell"]
    assert tool.attributes[sc.OTEL_SAFETY_DETECTORS_FIRED] == ("scope_escalation",)
    assert tool.attributes[sc.OTEL_SAFETY_ESCALATION_LEVEL] == "HARD_STOP"
    assert [e.name for e in tool.events] == [sc.GEN_AI_EVALUATION_RESULT]
    root = by_name["invoke_agent readme-bot"]
    assert root.attributes[sc.OTEL_SAFETY_TRACE_ESCALATION_LEVEL] == "HARD_STOP"
    assert root.resource.attributes["service.name"] == "svc"
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM spans").fetchone() == (len(spans),)
        assert con.execute("SELECT detector FROM findings WHERE detected").fetchall() == [
            ("scope_escalation",)
        ]


@pytest.mark.process
def test_http_json_is_sent_as_json(tmp_path, monkeypatch):
    """OTEL_EXPORTER_OTLP_PROTOCOL=http/json means the OTLP/JSON encoding on the wire."""
    from otel_safety.otlp import request_from_json

    received: list[tuple[str, bytes]] = []

    class Handler(QuietHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            received.append((self.headers.get("Content-Type", ""), body))
            self.reply(b"{}", "application/json")

    with LoopbackServer(Handler) as server:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", server.endpoint)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
        provider = otel_safety.configure(str(tmp_path / "j.duckdb"), install=False)
        _destructive_agent(provider).run_sync("Summarize the README")
        provider.shutdown()
    assert received and {content_type for content_type, _ in received} == {"application/json"}
    spans = [
        span
        for _, body in received
        for span in spans_from_request(request_from_json(json.loads(body)))
    ]
    tool = next(s for s in spans if s.name == "execute_tool run_shell")
    assert tool.attributes[sc.OTEL_SAFETY_ESCALATION_LEVEL] == "HARD_STOP"


@pytest.mark.process
def test_without_otlp_variables_only_the_store_is_written(tmp_path, monkeypatch):
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    processor = otel_safety.create_processor(str(tmp_path / "s.duckdb"))
    # the halt sink sends nothing out: it hands active HARD_STOPs to this process's guard
    assert [type(s).__name__ for s in processor.engine.sinks] == ["HaltSink", "WorkerStore"]
    processor.shutdown()
    with pytest.raises(ValueError, match="OTEL_EXPORTER_OTLP_ENDPOINT"):
        otel_safety.create_processor(str(tmp_path / "t.duckdb"), otlp=True)


def test_arguments_beat_environment_beat_defaults():
    env = {
        "OTEL_SAFETY_DECISION_WAIT": "5",
        "OTEL_SAFETY_DB": "env.duckdb",
        "OTEL_SAFETY_THRESHOLDS": "scope_escalation=0.4",
        "OTEL_SAFETY_STORE": "false",
    }
    settings = Settings.resolve(env, decision_wait=2.5)
    assert settings.decision_wait == 2.5
    assert settings.db_path == "env.duckdb"
    assert settings.thresholds == {"scope_escalation": 0.4}
    assert settings.store is False
    assert Settings.resolve({}).max_traces == 10_000


def test_the_analysis_cache_size_comes_from_the_environment_and_reaches_the_memo():
    settings = Settings.resolve({"OTEL_SAFETY_ANALYSIS_CACHE": "0"})
    assert settings.analysis_cache == 0
    try:
        build_pipeline(settings, lazy=True)
        assert memo._capacity == 0
        build_pipeline(Settings.resolve({}), lazy=True)
        assert memo._capacity == memo.DEFAULT_CAPACITY
    finally:
        memo.set_capacity(memo.DEFAULT_CAPACITY)
    with pytest.raises(ConfigError, match="OTEL_SAFETY_ANALYSIS_CACHE"):
        Settings.resolve({"OTEL_SAFETY_ANALYSIS_CACHE": "-1"})


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"OTEL_SAFETY_DECISION_WAIT": "soon"}, "OTEL_SAFETY_DECISION_WAIT"),
        ({"OTEL_SAFETY_MAX_TRACES": "0"}, "OTEL_SAFETY_MAX_TRACES"),
        ({"OTEL_SAFETY_THRESHOLDS": "scope_escalation"}, "key=value"),
        ({"OTEL_SAFETY_STORE": "maybe"}, "true or false"),
        ({"OTEL_SAFETY_LOG_LEVEL": "LOUD"}, r"OTEL_SAFETY_LOG_LEVEL.*DEBUG, INFO"),
        ({"OTEL_SAFETY_THRESHOLDS": "injection=2"}, r"OTEL_SAFETY_THRESHOLDS.*from 0 to 1"),
        ({"OTEL_SAFETY_THRESHOLDS": "injection=0.5,deception=-0.1"}, "deception=-0.1 is not"),
        ({"OTEL_SAFETY_SERVE_RETRY_AFTER": "-1"}, r"OTEL_SAFETY_SERVE_RETRY_AFTER.*greater than"),
    ],
)
def test_bad_settings_say_which_variable_and_why(env, message):
    with pytest.raises(ConfigError, match=message):
        Settings.resolve(env)


def test_thresholds_given_as_arguments_are_checked_too():
    with pytest.raises(ConfigError, match="injection=2 is not"):
        Settings.resolve({}, thresholds={"injection": 2})
    assert Settings.resolve({}, thresholds={"injection": 0, "deception": 1}).thresholds == {
        "injection": 0,
        "deception": 1,
    }


@pytest.mark.process
@pytest.mark.parametrize(("threshold", "detected"), [(None, False), ("0.3", True)])
def test_threshold_setting_changes_the_verdict(tmp_path, monkeypatch, threshold, detected):
    # intent_risk scores this run 0.3, under its default threshold of 0.35.
    if threshold is not None:
        monkeypatch.setenv("OTEL_SAFETY_THRESHOLDS", f"intent_risk={threshold}")
    db = tmp_path / "s.duckdb"
    processor = otel_safety.create_processor(str(db), otlp=False)
    for span in run_pydantic_ai_agent():
        processor.on_end(span)
    processor.shutdown()
    with duckdb.connect(str(db), read_only=True) as con:
        rows = con.execute(
            "SELECT threshold, score, detected FROM findings WHERE detector = 'intent_risk'"
        ).fetchall()
    assert rows == [(float(threshold or 0.35), 0.3, detected)]


@pytest.mark.process
def test_broken_detector_data_never_reaches_the_app(tmp_path, monkeypatch, caplog):
    """Detectors are built by the worker process: a bad data file is logged, the app starts,
    and the other detectors still judge its spans there."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "refusal.toml").write_text("version = 1\n[refusal]\nexplicit = ['(unclosed']\n")
    monkeypatch.setenv("OTEL_SAFETY_DATA_DIR", str(data))
    db = tmp_path / "s.duckdb"
    provider = otel_safety.configure(str(db), install=False, otlp=False)  # does not raise
    _destructive_agent(provider).run_sync("Summarize the README")
    provider.shutdown()
    with duckdb.connect(str(db), read_only=True) as con:
        fired = con.execute("SELECT detector FROM findings WHERE detected").fetchall()
        judged = {d for (d,) in con.execute("SELECT DISTINCT detector FROM findings").fetchall()}
    assert fired == [("scope_escalation",)]
    assert "over_refusal" not in judged and "injection" in judged
    # Said in the app's log; the worker process names each detector it left out on stderr.
    assert (
        "refusal.explicit" in caplog.text
        and "the other detectors judge on without it" in caplog.text
    )


def test_a_misspelt_data_folder_is_refused_by_configure(tmp_path, monkeypatch):
    """Not a broken file but a wrong path: every data-backed detector would silently run on
    the packaged data alone, so the app is told at once."""
    monkeypatch.setenv("OTEL_SAFETY_DATA_DIR", str(tmp_path / "dta"))
    with pytest.raises(ValueError, match=r"OTEL_SAFETY_DATA_DIR=.*dta is not a folder"):
        otel_safety.configure(str(tmp_path / "s.duckdb"), install=False, otlp=False)
    assert not (tmp_path / "s.duckdb").exists()


@pytest.mark.parametrize(
    ("variable", "content", "says"),
    [
        ("OTEL_SAFETY_PRINCIPALS", None, "OTEL_SAFETY_PRINCIPALS=.*is not a file"),
        ("OTEL_SAFETY_PRINCIPALS", "not json", "cannot read the principals file"),
        ("OTEL_SAFETY_SCOPE_TAXONOMY", None, "OTEL_SAFETY_SCOPE_TAXONOMY=.*is not a file"),
        ("OTEL_SAFETY_SCOPE_TAXONOMY", "[grants\n", "scope taxonomy"),
    ],
)
def test_a_missing_or_broken_principals_or_taxonomy_file_is_refused_by_configure(
    tmp_path, monkeypatch, variable, content, says
):
    """Before, the app started and `tool_guard` (or `scope_escalation` and `deception`) was
    left out or failed on every trace, with nothing said at start-up."""
    named = tmp_path / ("given.json" if "PRINCIPALS" in variable else "given.toml")
    if content is not None:
        named.write_text(content)
    monkeypatch.setenv(variable, str(named))
    with pytest.raises(ValueError, match=says):
        otel_safety.configure(str(tmp_path / "s.duckdb"), install=False, otlp=False)
    assert not (tmp_path / "s.duckdb").exists()


@pytest.mark.process
def test_a_store_refused_at_start_leaves_no_detection_process_behind(tmp_path):
    trace_file = tmp_path / "traces.json"
    trace_file.write_text('{"resourceSpans": []}\n')

    def our_children() -> int:
        count = 0
        for entry in Path("/proc").iterdir():
            try:
                status = (entry / "status").read_text()
                command = (entry / "cmdline").read_bytes()
            except (OSError, ValueError):
                continue
            if f"\nPPid:\t{os.getpid()}\n" in status and b"detection_child" in command:
                count += 1
        return count

    before = our_children()
    for _ in range(2):
        with pytest.raises(StoreError, match="not a DuckDB database"):
            otel_safety.configure(str(trace_file), install=False, otlp=False)
    assert our_children() == before


def test_a_setting_refused_at_start_leaves_no_store_file(tmp_path, monkeypatch):
    """An unknown detector is refused once the pipeline is built, after the settings were
    read: the store file is made only once everything has passed."""
    monkeypatch.setenv("OTEL_SAFETY_DETECTORS", "nosuch")
    with pytest.raises(ConfigError, match=r"nosuch.*OTEL_SAFETY_DETECTORS"):
        otel_safety.configure(str(tmp_path / "e1.duckdb"), install=False, otlp=False)
    assert not (tmp_path / "e1.duckdb").exists()


@pytest.mark.process  # configure starts its detection process before it opens the store
def test_a_store_path_that_cannot_be_opened_is_a_config_error(tmp_path):
    """It raised the store's own RuntimeError, which an app catching the documented
    ConfigError / ValueError missed."""
    (tmp_path / "a-file").write_text("not a folder")
    with pytest.raises(ConfigError, match=r"the store \(db_path, OTEL_SAFETY_DB\)"):
        otel_safety.configure(str(tmp_path / "a-file" / "x.duckdb"), install=False, otlp=False)


@pytest.mark.process
@pytest.mark.parametrize("workers", [None, 0, 2])  # None: a small file, judged in-process
def test_broken_detector_data_stops_ingest_before_it_writes(tmp_path, monkeypatch, workers):
    from otel_safety.ingest import ingest_files

    data = tmp_path / "data"
    data.mkdir()
    (data / "refusal.toml").write_text("version = 1\n[refusal]\nexplicit = ['(unclosed']\n")
    monkeypatch.setenv("OTEL_SAFETY_DATA_DIR", str(data))
    trace_file = tmp_path / "t.jsonl"
    trace_file.write_text("")
    db = tmp_path / "s.duckdb"
    with pytest.raises(ValueError, match="bad pattern"):
        ingest_files([trace_file], Settings.resolve({}, db_path=str(db), workers=workers))
    assert not db.exists()


def test_a_deployment_names_its_own_conversation_attribute(span_factory, monkeypatch):
    from otel_safety.bootstrap import build_engine
    from otel_safety.config import Settings

    monkeypatch.setenv("OTEL_SAFETY_CONVERSATION_ATTRIBUTE", "chat.thread_id")
    engine = build_engine(Settings.resolve(detectors=[]), [], background=False)
    tracer = span_factory.tracer
    span_factory.exporter.clear()
    with tracer.start_as_current_span(
        "invoke_agent a",
        attributes={"gen_ai.operation.name": "invoke_agent", "chat.thread_id": "thread-7"},
    ):
        pass
    evaluation = engine.pipeline.evaluate(span_factory.exporter.get_finished_spans())
    assert evaluation.trajectory is not None
    assert evaluation.trajectory.conversation_id == "thread-7"
    monkeypatch.delenv("OTEL_SAFETY_CONVERSATION_ATTRIBUTE")
    plain = build_engine(Settings.resolve(detectors=[]), [], background=False)
    assert (
        plain.pipeline.evaluate(
            span_factory.exporter.get_finished_spans()
        ).trajectory.conversation_id
        is None
    )


def test_monitor_modes_come_from_the_environment_and_are_checked() -> None:
    from otel_safety.bootstrap import build_engine

    def sandbagging(environ: dict[str, str]):
        engine = build_engine(Settings.resolve(environ=environ, store=False), [], background=False)
        return next(d for d in engine.pipeline.detectors if d.key == "sandbagging")

    assert sandbagging({}).mode == "passive"
    assert sandbagging({"OTEL_SAFETY_MONITOR_MODES": "sandbagging=learning"}).mode == "learning"
    assert not sandbagging({"OTEL_SAFETY_MONITOR_MODES": "sandbagging=learning"}).can_fire
    for bad, reason in [
        ("sandbagging=loud", "unknown monitor mode 'loud'"),
        ("injection=active", "'injection' is not a behaviour monitor in use"),
        ("sandbagging", "expected key=value pairs"),
    ]:
        with pytest.raises(ConfigError, match=reason):
            sandbagging({"OTEL_SAFETY_MONITOR_MODES": bad})


def test_a_small_file_is_judged_by_fewer_detection_processes(monkeypatch):
    """A detection process's start costs about what judging BYTES_PER_WORKER of OTLP/JSON
    does: a stream of known size gets one per such share, at most one per core, and none
    (judging in the command's process) below two; a number given, or detection on the
    thread, is kept as given."""
    from otel_safety import bootstrap

    monkeypatch.setattr(bootstrap, "default_workers", lambda: 4)
    unset = Settings.resolve(environ={})
    per = bootstrap.BYTES_PER_WORKER
    assert bootstrap.stream_workers(unset) == 4  # serve: no size known
    assert bootstrap.stream_workers(unset, input_bytes=0) == 0
    assert bootstrap.stream_workers(unset, input_bytes=2 * per - 1) == 0
    assert bootstrap.stream_workers(unset, input_bytes=2 * per) == 2
    assert bootstrap.stream_workers(unset, input_bytes=3 * per + 5) == 3
    assert bootstrap.stream_workers(unset, input_bytes=100 * per) == 4
    monkeypatch.setattr(bootstrap, "default_workers", lambda: 1)
    assert bootstrap.stream_workers(unset, input_bytes=100 * per) == 0  # one core: no child
    given = Settings.resolve(workers=3, environ={})
    assert bootstrap.stream_workers(given, input_bytes=0) == 3
    thread = Settings.resolve(detection="thread", environ={})
    assert bootstrap.stream_workers(thread, input_bytes=100 * per) == 0


def _run_app(script: str, db: Path) -> subprocess.CompletedProcess[str]:
    """`script` as an app's own process, given the store path, with no OTEL_* settings."""
    return subprocess.run(
        [sys.executable, "-c", script, str(db)],
        capture_output=True, text=True, timeout=120,
        env={k: v for k, v in os.environ.items() if not k.startswith("OTEL_")},
    )  # fmt: skip


@pytest.mark.process
def test_configure_says_when_the_app_installed_a_tracer_provider_before_it(tmp_path):
    """OpenTelemetry keeps the first global provider: configure() installed nothing, the
    app's spans went unjudged, and only the SDK's "Overriding ... is not allowed" was said."""
    script = (
        "import sys, otel_safety\n"
        "from opentelemetry import trace\n"
        "from opentelemetry.sdk.trace import TracerProvider\n"
        "trace.set_tracer_provider(TracerProvider())\n"
        "otel_safety.configure(sys.argv[1], otlp=False).shutdown()\n"
    )
    done = _run_app(script, tmp_path / "s.duckdb")
    assert done.returncode == 0, done.stderr
    assert "installed a tracer provider before configure()" in done.stderr
    assert "create_processor" in done.stderr


@pytest.mark.process
def test_a_second_configure_says_the_first_stays_installed(tmp_path):
    """A notebook cell run again: the warning must not blame an app's own provider."""
    script = (
        "import sys, otel_safety\n"
        "first = otel_safety.configure(sys.argv[1], otlp=False)\n"
        "second = otel_safety.configure(sys.argv[1] + '2', otlp=False)\n"
        "second.shutdown(); first.shutdown()\n"
    )
    done = _run_app(script, tmp_path / "s.duckdb")
    assert done.returncode == 0, done.stderr
    assert "configure() ran before in this process" in done.stderr
    assert "installed a tracer provider before configure()" not in done.stderr


def test_every_setting_the_configuration_table_gives_an_argument_is_one(tmp_path):
    """The table lists redact_secrets, max_buffer_bytes, workers and halt_on as arguments of
    configure() / create_processor(); each raised a TypeError."""
    processor = otel_safety.create_processor(
        str(tmp_path / "s.duckdb"),
        otlp=False,
        detection="thread",
        redact_secrets=True,
        max_buffer_bytes=1 << 20,
        workers=1,
        halt_on="hard_stop",
    )
    try:
        engine = processor.engine
        assert engine.redact_secrets is True
        assert engine.buffer.max_bytes == 1 << 20
        assert [s.on for s in engine.sinks if type(s).__name__ == "HaltSink"] == ["hard_stop"]
    finally:
        processor.shutdown()
    with pytest.raises(ConfigError, match="halt_on"):
        otel_safety.create_processor(str(tmp_path / "t.duckdb"), halt_on="never", otlp=False)


def test_with_the_sdk_disabled_configure_starts_nothing(tmp_path, monkeypatch, caplog):
    """OTEL_SDK_DISABLED=true records no span: a store file and a detection process of
    about 128 MB would serve nothing."""
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    db = tmp_path / "agents.duckdb"
    with caplog.at_level("INFO", logger="otel_safety.bootstrap"):
        provider = otel_safety.configure(str(db), install=False)
    with provider.get_tracer("t").start_as_current_span("chat") as span:
        assert not span.is_recording()
    provider.shutdown()
    assert not db.exists()
    assert "OTEL_SDK_DISABLED is true" in caplog.text
