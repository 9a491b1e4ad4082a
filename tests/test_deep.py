"""The deep analysis tier against a real local OpenAI-compatible server (tests/fake_openai.py):
scripted dimension JSON, malformed JSON, slow replies and HTTP errors, through the same
engine, store and log records as live traffic."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pytest
from fake_openai import FakeOpenAIServer, delayed, http_error, text_reply
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor

from otel_safety import semconv as sc
from otel_safety.bootstrap import build_engine
from otel_safety.config import ConfigError, Settings
from otel_safety.deep import DIMENSIONS, describe
from otel_safety.deep.reply import ReplyError, parse_reply
from otel_safety.engine import SafetyEngine
from otel_safety.evaluation.cases import Case, SpanWriter
from otel_safety.exporters.duckdb import DuckDBStore
from otel_safety.exporters.evaluation_logs import EvaluationLogSink
from otel_safety.mapping import span_id_hex, trace_id_hex

SECRET = "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8S9t0"


def dimension_reply(
    verdict: str = "unsafe", level: str = "HARD_STOP", top: float = 0.9
) -> dict[str, Any]:
    """An assistant turn with the JSON the prompt asks for."""
    dimensions = {name: {"score": 0.05, "reason": f"no sign of {name}"} for name in DIMENSIONS}
    dimensions["irreversible_action"] = {"score": top, "reason": "it deleted the backups"}
    body = {"dimensions": dimensions, "verdict": verdict, "level": level, "summary": "deleted"}
    return text_reply(json.dumps(body))


def agent_case(number: int = 0, result: str = "done") -> Case:
    """A run with one tool call whose result carries a secret and a long text."""
    return Case(
        case_id=f"deep:{number}",
        dataset="deep",
        system="You are the ops agent.",
        messages=[
            {"role": "user", "content": "Tidy the backup folder"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {
                            "name": "list_files",
                            "arguments": json.dumps({"path": "/backups"}),
                        },
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": f"key={SECRET} {result}"},
            {"role": "assistant", "content": "The backup folder is tidy now."},
        ],
        labels={},
    )


class Harness:
    """An engine with the deep tier on (every agent run a candidate), a real DuckDB file and
    log records in memory."""

    def __init__(self, tmp_path: Path, server: FakeOpenAIServer, **deep: Any) -> None:
        self.db = str(tmp_path / "deep.duckdb")
        self.logs = InMemoryLogRecordExporter()
        provider = LoggerProvider()
        provider.add_log_record_processor(SimpleLogRecordProcessor(self.logs))
        options = {
            "deep": True,
            "deep_model": "judge-1",
            "deep_base_url": server.base_url,
            "deep_levels": [level for level in ("NONE", "CLARIFY", "WARN", "SOFT_STOP")]
            + ["HUMAN_REVIEW", "HARD_STOP"],
            "deep_retries": 0,
            "deep_timeout": 10.0,
            **deep,
        }
        self.settings = Settings.resolve(environ={}, db_path=self.db, **options)
        self.engine: SafetyEngine = build_engine(
            self.settings,
            [DuckDBStore(self.db), EvaluationLogSink(provider)],
            background=False,
        )
        self.writer = SpanWriter()
        self.roots: dict[str, str] = {}

    def run(self, case: Case) -> str:
        spans = self.writer.spans(case)
        trace_id = trace_id_hex(spans[0].context.trace_id)
        root = next(s for s in spans if s.parent is None)
        self.roots[trace_id] = span_id_hex(root.context.span_id)
        self.engine.process(spans)
        self.engine.drain()
        return trace_id

    def close(self) -> None:
        self.engine.shutdown()
        self.writer.shutdown()

    def query(self, sql: str, *params: Any) -> list[tuple]:
        with duckdb.connect(self.db, read_only=True) as con:
            return con.execute(sql, list(params)).fetchall()


@pytest.fixture
def environ_clean(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "OTEL_SAFETY_DEEP"):
        monkeypatch.delenv(name, raising=False)
    yield


def test_off_by_default_and_never_guesses_an_endpoint(environ_clean: None) -> None:
    settings = Settings.resolve(environ={"OPENAI_API_KEY": "sk-app-own"})
    assert settings.deep is False
    engine = build_engine(settings, [], background=False)
    try:
        assert engine.deep is None
    finally:
        engine.shutdown()
    assert describe(settings).startswith("off")
    on = Settings.resolve(environ={"OTEL_SAFETY_DEEP": "true", "OTEL_SAFETY_DEEP_MODEL": "m"})
    with pytest.raises(ConfigError, match="OTEL_SAFETY_DEEP_BASE_URL"):
        build_engine(on, [], background=False)
    assert describe(on).startswith("misconfigured")
    named = Settings.resolve(
        environ={"OTEL_SAFETY_DEEP": "1", "OTEL_SAFETY_DEEP_BASE_URL": "http://127.0.0.1:9/v1"}
    )
    with pytest.raises(ConfigError, match="OTEL_SAFETY_DEEP_MODEL"):
        build_engine(named, [], background=False)


def test_settings_from_the_environment() -> None:
    settings = Settings.resolve(
        environ={
            "OTEL_SAFETY_DEEP": "yes",
            "OTEL_SAFETY_DEEP_LEVELS": "warn, hard_stop",
            "OTEL_SAFETY_DEEP_DETECTORS": "injection,tool_guard",
            "OTEL_SAFETY_DEEP_SAMPLE_RATE": "0.25",
            "OTEL_SAFETY_DEEP_PER_MINUTE": "7",
        }
    )
    assert settings.deep_levels == ["WARN", "HARD_STOP"]
    assert settings.deep_detectors == ["injection", "tool_guard"]
    assert (settings.deep_sample_rate, settings.deep_per_minute) == (0.25, 7)
    with pytest.raises(ConfigError, match="OTEL_SAFETY_DEEP_LEVELS"):
        Settings.resolve(environ={"OTEL_SAFETY_DEEP_LEVELS": "PANIC"})


@pytest.mark.process
def test_a_verdict_becomes_a_finding_a_raised_level_and_a_log_record(tmp_path: Path) -> None:
    with FakeOpenAIServer([dimension_reply()]) as server:
        harness = Harness(tmp_path, server)
        trace_id = harness.run(agent_case(result="x" * 5000))
        assert harness.engine.force_flush(10_000)
        harness.close()
    (request,) = server.requests
    sent = request["messages"][1]["content"]
    assert request["model"] == "judge-1"
    assert 'list_files({"path": "/backups"})' in sent
    assert "Tidy the backup folder" in sent and "The backup folder is tidy now." in sent
    assert SECRET not in sent and "[REDACTED]" in sent
    assert "more characters cut" in sent and "1 field(s) were cut" in sent

    (finding,) = harness.query(
        "SELECT span_id, detected, score, severity, escalation_level, details FROM findings "
        "WHERE detector = 'deep_analysis' AND trace_id = ?",
        trace_id,
    )
    span_id, detected, score, severity, level, details = finding
    details = json.loads(details)
    assert span_id == harness.roots[trace_id]
    assert (detected, score, severity, level) == (True, 0.9, "critical", "HARD_STOP")
    assert set(details["dimensions"]) == set(DIMENSIONS)
    assert details["dimensions"]["irreversible_action"]["reason"] == "it deleted the backups"
    assert details["model"] == "judge-1" and details["prompt_version"] == "deep-1"
    assert details["latency_ms"] > 0 and details["tokens"] == 15

    (trace,) = harness.query(
        "SELECT escalation_level, detectors_fired FROM traces WHERE trace_id = ?", trace_id
    )
    assert trace[0] == "HARD_STOP" and "deep_analysis" in json.loads(trace[1])
    assert harness.query(
        "SELECT DISTINCT trace_escalation_level FROM spans WHERE trace_id = ?", trace_id
    ) == [("HARD_STOP",)]
    (run,) = harness.query(
        "SELECT outcome, level_before, level_after, calls, prompt_tokens, completion_tokens "
        "FROM deep_runs WHERE trace_id = ?",
        trace_id,
    )
    assert run[0] == "ok" and run[2] == "HARD_STOP" and run[1] != "HARD_STOP"
    assert run[3:] == (1, 10, 5)

    records = [
        r.log_record
        for r in harness.logs.get_finished_logs()
        if r.log_record.attributes.get(sc.GEN_AI_EVALUATION_NAME) == "deep_analysis"
    ]
    (record,) = records
    assert record.event_name == sc.GEN_AI_EVALUATION_RESULT
    assert format(record.trace_id, "032x") == trace_id
    assert format(record.span_id, "016x") == harness.roots[trace_id]
    assert record.attributes[sc.OTEL_SAFETY_DEEP_MODEL] == "judge-1"
    assert record.attributes[sc.OTEL_SAFETY_DEEP_PROMPT_VERSION] == "deep-1"
    assert record.attributes[sc.GEN_AI_EVALUATION_SCORE_LABEL] == "unsafe"
    stats = harness.engine.stats
    assert (stats["deep_queued"], stats["deep_analysed"], stats["deep_raised"]) == (1, 1, 1)


def test_a_safe_verdict_never_lowers_the_level(tmp_path: Path) -> None:
    with FakeOpenAIServer([dimension_reply("safe", "NONE", 0.1)]) as server:
        harness = Harness(tmp_path, server)
        trace_id = harness.run(agent_case())
        harness.close()
    before = harness.query(
        "SELECT level_before, level_after FROM deep_runs WHERE trace_id = ?", trace_id
    )
    assert before[0][0] == before[0][1]
    assert harness.query("SELECT detected FROM findings WHERE detector = 'deep_analysis'") == [
        (False,)
    ]
    assert harness.engine.stats["deep_raised"] == 0


def test_malformed_json_is_asked_again_once(tmp_path: Path) -> None:
    with FakeOpenAIServer([text_reply("Sure! The run looks risky."), dimension_reply()]) as server:
        harness = Harness(tmp_path, server)
        harness.run(agent_case())
        harness.close()
    assert len(server.requests) == 2
    retry = server.requests[1]["messages"]
    assert retry[-2] == {"role": "assistant", "content": "Sure! The run looks risky."}
    assert "not JSON" in retry[-1]["content"]
    assert harness.query("SELECT outcome, calls FROM deep_runs") == [("ok", 2)]
    assert harness.query("SELECT count(*) FROM findings WHERE detector = 'deep_analysis'") == [(1,)]


def test_malformed_twice_is_an_error_never_a_verdict(tmp_path: Path) -> None:
    missing = json.dumps({"verdict": "unsafe", "level": "HARD_STOP", "dimensions": {}})
    with FakeOpenAIServer([text_reply("{not json"), text_reply(missing)]) as server:
        harness = Harness(tmp_path, server)
        trace_id = harness.run(agent_case())
        harness.close()
    (run,) = harness.query("SELECT outcome, error, calls, level_after FROM deep_runs")
    assert run[0] == "error" and "unparseable reply, twice" in run[1]
    assert "dimensions.authority_violation" in run[1] and run[2] == 2
    assert harness.query("SELECT count(*) FROM findings WHERE detector = 'deep_analysis'") == [(0,)]
    (level,) = harness.query("SELECT escalation_level FROM traces WHERE trace_id = ?", trace_id)
    assert level[0] == run[3]  # untouched
    assert harness.engine.stats["deep_errors"] == 1
    assert harness.engine.stats["deep_analysed"] == 0


def test_a_slow_model_times_out_and_is_recorded(tmp_path: Path) -> None:
    with FakeOpenAIServer([delayed(3.0, dimension_reply())]) as server:
        harness = Harness(tmp_path, server, deep_timeout=0.5)
        harness.run(agent_case())
        harness.close()
    (run,) = harness.query("SELECT outcome, error, calls FROM deep_runs")
    assert run[0] == "error" and "Timeout" in run[1] and run[2] == 0
    assert harness.engine.stats["deep_errors"] == 1


def test_server_errors_are_retried_with_backoff(tmp_path: Path) -> None:
    replies = [http_error(503), http_error(500), dimension_reply()]
    with FakeOpenAIServer(replies) as server:
        harness = Harness(tmp_path, server, deep_retries=2)
        harness.run(agent_case())
        harness.close()
    assert len(server.requests) == 3
    assert harness.query("SELECT outcome FROM deep_runs") == [("ok",)]


def test_errors_past_the_retries_are_recorded(tmp_path: Path) -> None:
    with FakeOpenAIServer([http_error(500), http_error(500)]) as server:
        harness = Harness(tmp_path, server, deep_retries=1)
        harness.run(agent_case())
        harness.close()
    assert len(server.requests) == 2
    (run,) = harness.query("SELECT outcome, error FROM deep_runs")
    assert run[0] == "error" and "InternalServerError" in run[1]


def test_the_queue_is_bounded_and_drops_are_counted(tmp_path: Path) -> None:
    replies = [delayed(1.0, dimension_reply()) for _ in range(6)]
    with FakeOpenAIServer(replies) as server:
        harness = Harness(tmp_path, server, deep_queue_size=1, deep_concurrency=1)
        for number in range(6):
            harness.run(agent_case(number))  # never waits for the model
        stats = harness.engine.stats
        assert stats["deep_candidates"] == 6
        assert stats["deep_dropped"] >= 3
        assert stats["deep_queued"] + stats["deep_dropped"] == 6
        harness.close()
    analysed = harness.query("SELECT count(*) FROM deep_runs")[0][0]
    assert analysed == stats["deep_queued"] == len(server.requests)


def test_per_minute_budget_and_sampling(tmp_path: Path) -> None:
    with FakeOpenAIServer([dimension_reply() for _ in range(4)]) as server:
        harness = Harness(tmp_path, server, deep_per_minute=2)
        for number in range(4):
            harness.run(agent_case(number))
        harness.close()
    assert harness.engine.stats["deep_over_budget"] == 2
    assert len(server.requests) == 2
    with FakeOpenAIServer([]) as server:
        harness = Harness(tmp_path / "sampled", server, deep_sample_rate=0.0)
        harness.run(agent_case())
        harness.close()
    assert harness.engine.stats["deep_sampled_out"] == 1 and server.requests == []


def test_token_budget(tmp_path: Path) -> None:
    with FakeOpenAIServer([dimension_reply() for _ in range(3)]) as server:
        harness = Harness(tmp_path, server, deep_tokens_per_minute=15, deep_concurrency=1)
        harness.run(agent_case(0))
        assert harness.engine.force_flush(10_000)  # its 15 tokens are spent now
        harness.run(agent_case(1))
        harness.close()
    assert len(server.requests) == 1
    assert harness.engine.stats["deep_over_token_budget"] == 1


def test_only_candidates_are_sent(tmp_path: Path) -> None:
    """With the default levels a quiet run is not a candidate: nothing is sent."""
    with FakeOpenAIServer([]) as server:
        harness = Harness(tmp_path, server, deep_levels=["HARD_STOP"], deep_uncertainty=0.0)
        harness.run(agent_case())
        harness.close()
    assert server.requests == []
    assert harness.engine.stats["deep_candidates"] == 0


def test_parse_reply_accepts_a_fenced_object_and_refuses_the_rest() -> None:
    body = json.loads(dimension_reply()["content"])
    assert parse_reply(f"```json\n{json.dumps(body)}\n```").verdict == "unsafe"
    for bad, problem in (
        ("", "empty"),
        ("[1]", "not an object"),
        (json.dumps({**body, "verdict": "maybe"}), "verdict"),
        (json.dumps({**body, "level": "PANIC"}), "level"),
    ):
        with pytest.raises(ReplyError, match=problem):
            parse_reply(bad)
    too_high = json.loads(json.dumps(body))
    too_high["dimensions"]["resource_abuse"]["score"] = 1.5
    with pytest.raises(ReplyError, match="resource_abuse"):
        parse_reply(json.dumps(too_high))


def test_a_cedar_policy_reads_the_deep_analysis(tmp_path: Path) -> None:
    """The model calls the run safe, but one dimension is high: a Cedar rule denies it."""
    policy = tmp_path / "deep.cedar"
    policy.write_text(
        'permit (principal, action == Action::"deny", resource) when {\n'
        "  context.deep.analysed && context.deep.dimensions.irreversible_action >= 80\n"
        "};\n",
        encoding="utf-8",
    )
    with FakeOpenAIServer([dimension_reply("safe", "NONE", 0.85)]) as server:
        harness = Harness(tmp_path, server, policy=str(policy))
        trace_id = harness.run(agent_case())
        harness.close()
    (trace,) = harness.query(
        "SELECT escalation_level, escalation_by_policy FROM traces WHERE trace_id = ?", trace_id
    )
    assert trace == ("HARD_STOP", True)
    (run,) = harness.query("SELECT level_before, level_after FROM deep_runs")
    assert run[0] != "HARD_STOP" and run[1] == "HARD_STOP"  # no deny before the analysis


def _guard(server: FakeOpenAIServer, **options: Any):
    from otel_safety.deep.settings import deep_config
    from otel_safety.guard import Guard

    settings = Settings.resolve(
        environ={},
        deep=True,
        deep_model="judge-1",
        deep_base_url=server.base_url,
        deep_retries=0,
        **options,
    )
    return Guard(principals=None, deep=deep_config(settings, environ={}))


def test_the_guard_asks_the_model_inline_when_told(tmp_path: Path) -> None:
    from otel_safety.guard import Decision

    with FakeOpenAIServer([dimension_reply(), dimension_reply("safe", "NONE", 0.1)]) as server:
        guard = _guard(server)
        calm = guard.check_tool_call("list_files", {"path": "/backups"}, record=False)
        assert calm.decision is Decision.ALLOW and calm.deep is None  # not asked
        assert server.requests == []
        raised = guard.check_tool_call(
            "list_files", {"path": "/backups"}, record=False, deep=True, task="Tidy the backups"
        )
        kept = guard.check_tool_call("list_files", {"path": "/tmp"}, record=False, deep=True)
    assert raised.decision is Decision.BLOCK and "deep.analysis" in raised.rule_ids
    assert raised.deep is not None and raised.deep["dimensions"]["irreversible_action"] == 0.9
    assert raised.deep["model"] == "judge-1" and raised.deep["prompt_version"] == "deep-1"
    sent = server.requests[0]["messages"][1]["content"]
    assert "Tidy the backups" in sent and 'list_files({"path": "/backups"})' in sent
    assert kept.decision is Decision.ALLOW and kept.deep is not None
    assert kept.deep["verdict"] == "safe"


def test_the_guard_fails_open_or_closed_on_its_deadline(tmp_path: Path) -> None:
    from otel_safety.guard import Decision

    slow = [delayed(2.0, dimension_reply()), delayed(2.0, dimension_reply())]
    with FakeOpenAIServer(slow) as server:
        opened = _guard(server).check_tool_call(
            "list_files", {"path": "/tmp"}, record=False, deep=True, deep_timeout=0.3
        )
        closed = _guard(server, deep_fail_closed=True).check_tool_call(
            "list_files", {"path": "/tmp"}, record=False, deep=True, deep_timeout=0.3
        )
    assert opened.decision is Decision.ALLOW and opened.deep is not None
    assert opened.deep["fail"] == "open" and "Timeout" in opened.deep["error"]
    assert closed.decision is Decision.BLOCK and closed.deep["fail"] == "closed"
    assert any("fail-closed" in reason for reason in closed.reasons)


def test_the_guard_says_when_deep_is_not_configured(environ_clean: None) -> None:
    from otel_safety.guard import Guard

    with pytest.raises(ConfigError, match="OTEL_SAFETY_DEEP"):
        Guard(principals=None).check_tool_call("list_files", {}, record=False, deep=True)


@pytest.mark.process
def test_configure_runs_the_tier_in_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """configure(): detectors in their worker process, the deep tier in the app's, fed by
    the same engine; the log record goes out through the app's LoggerProvider."""
    from otel_safety import configure

    db = tmp_path / "app.duckdb"
    logs = InMemoryLogRecordExporter()
    provider = LoggerProvider()
    provider.add_log_record_processor(SimpleLogRecordProcessor(logs))
    with FakeOpenAIServer([dimension_reply()]) as server:
        monkeypatch.setenv("OTEL_SAFETY_DEEP", "true")
        monkeypatch.setenv("OTEL_SAFETY_DEEP_MODEL", "judge-1")
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OTEL_SAFETY_DEEP_LEVELS", "NONE,CLARIFY,WARN,SOFT_STOP")
        tracer_provider = configure(
            str(db), install=False, logger_provider=provider, detection="process", otlp=False
        )
        try:
            tracer = tracer_provider.get_tracer("app")
            with (
                tracer.start_as_current_span(
                    "invoke_agent ops",
                    attributes={
                        "gen_ai.operation.name": "invoke_agent",
                        "gen_ai.agent.name": "ops",
                    },
                ),
                tracer.start_as_current_span(
                    "chat model",
                    attributes={
                        "gen_ai.operation.name": "chat",
                        "gen_ai.input.messages": json.dumps(
                            [{"role": "user", "parts": [{"type": "text", "content": "Summarize"}]}]
                        ),
                        "gen_ai.output.messages": json.dumps(
                            [{"role": "assistant", "parts": [{"type": "text", "content": "Done."}]}]
                        ),
                    },
                ),
            ):
                pass
            assert tracer_provider.force_flush(180_000)  # the detection process starts first
        finally:
            tracer_provider.shutdown()
    assert len(server.requests) == 1
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute(
            "SELECT count(*) FROM findings WHERE detector = 'deep_analysis' AND detected"
        ).fetchone() == (1,)
    assert any(
        r.log_record.attributes.get(sc.GEN_AI_EVALUATION_NAME) == "deep_analysis"
        for r in logs.get_finished_logs()
    )


@pytest.mark.process
def test_ingest_waits_for_the_deep_analysis(tmp_path: Path) -> None:
    """`otel-safety ingest`: the same tier, every queued analysis written before it ends."""
    import os
    import subprocess
    import sys

    from otel_safety.otlp import request_to_json

    writer = SpanWriter()
    trace_file = tmp_path / "traces.jsonl"
    lines = [json.dumps(request_to_json(writer.spans(agent_case(n)))) for n in range(3)]
    writer.shutdown()
    trace_file.write_text("\n".join(lines) + "\n", encoding="utf-8")
    db = tmp_path / "ingest.duckdb"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "OPENAI_"))}
    with FakeOpenAIServer([delayed(0.5, dimension_reply()) for _ in range(3)]) as server:
        env.update(
            OTEL_SAFETY_DEEP="true",
            OTEL_SAFETY_DEEP_MODEL="judge-1",
            OTEL_SAFETY_DEEP_BASE_URL=server.base_url,
            OTEL_SAFETY_DEEP_LEVELS="NONE,CLARIFY,WARN,SOFT_STOP,HUMAN_REVIEW,HARD_STOP",
            OTEL_SAFETY_WORKERS="1",
        )
        done = subprocess.run(
            [sys.executable, "-m", "otel_safety.cli", "ingest", str(trace_file), "--db", str(db)],
            capture_output=True,
            text=True,
            timeout=180,
            env=env,
            check=False,
        )
    assert done.returncode == 0, done.stderr
    assert "deep analysis: 3 candidates, 3 analysed" in done.stdout
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM deep_runs WHERE outcome = 'ok'").fetchone() == (3,)


@pytest.mark.process
def test_serve_runs_the_tier_and_counts_it_in_metrics(tmp_path: Path, span_factory) -> None:
    """`serve`: the same tier behind the sidecar's engine; candidates, analyses and drops
    of the bounded queue show at /metrics."""
    import httpx
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from sidecar_support import wait_for

    from otel_safety.sidecar import Sidecar, SidecarOptions

    replies = [delayed(1.0, dimension_reply()) for _ in range(4)]
    with FakeOpenAIServer(replies) as server:
        settings = Settings.resolve(
            environ={},
            db_path=str(tmp_path / "serve.duckdb"),
            decision_wait=5.0,
            deep=True,
            deep_model="judge-1",
            deep_base_url=server.base_url,
            deep_levels=["NONE", "CLARIFY", "WARN", "SOFT_STOP", "HUMAN_REVIEW", "HARD_STOP"],
            deep_queue_size=1,
            deep_concurrency=1,
        )
        with Sidecar(settings, SidecarOptions(grpc_port=0, http_port=0)) as sidecar:
            for number in range(4):
                spans = span_factory.agent_run(f"answer {number}", f"task {number}")
                httpx.post(
                    f"{sidecar.http_url}/v1/traces",
                    content=encode_spans(spans).SerializeToString(),
                    headers={"Content-Type": "application/x-protobuf"},
                )
            stats = sidecar.engine.stats
            wait_for(lambda: stats["deep_candidates"] == 4, what="four candidates")
            wait_for(
                lambda: (
                    stats["deep_analysed"] == stats["deep_queued"]
                    and sidecar.engine.deep
                    and sidecar.engine.deep.pending == 0
                ),
                what="the queued analyses",
            )
            text = httpx.get(f"{sidecar.http_url}/metrics").text
    series = dict(
        line.rsplit(" ", 1) for line in text.splitlines() if line and not line.startswith("#")
    )
    dropped = int(float(series["otel_safety_sidecar_engine_deep_dropped_total"]))
    analysed = int(float(series["otel_safety_sidecar_engine_deep_analysed_total"]))
    assert dropped >= 1 and analysed >= 1 and dropped + analysed == 4
    assert len(server.requests) == analysed


def test_status_and_the_named_query_show_what_the_tier_did(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], environ_clean: None
) -> None:
    from otel_safety.cli import main

    replies = [delayed(1.0, dimension_reply()), text_reply("no"), text_reply("still no")]
    with FakeOpenAIServer(replies) as server:
        harness = Harness(tmp_path, server, deep_queue_size=1, deep_concurrency=1)
        for number in range(4):
            harness.run(agent_case(number))
        harness.close()
    stats = harness.engine.stats
    assert main(["status", "--db", harness.db]) == 0
    out = capsys.readouterr().out
    assert "deep analysis: off (OTEL_SAFETY_DEEP is not set)" in out  # this process's settings
    assert f"in the store: {stats['deep_analysed']} analyses, {stats['deep_errors']} failed" in out
    assert f"dropped {stats['deep_dropped']}" in out and stats["deep_dropped"] >= 1
    assert main(["status", "--db", harness.db, "--format", "json"]) == 0
    status = json.loads(capsys.readouterr().out)["deep_analysis"]
    assert status["on"] is False and status["last_counters"]["deep_candidates"] == 4
    assert main(["query", "deep_analyses", "--db", harness.db, "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert sorted(r["outcome"] for r in rows) == sorted(
        ["ok"] * stats["deep_analysed"] + ["error"] * stats["deep_errors"]
    )
    assert all(r["summary"] == "deleted" for r in rows if r["outcome"] == "ok")


def test_eval_deep_runs_end_to_end_beside_the_rule_tier(shared_data: Path, tmp_path: Path) -> None:
    """`eval --deep` on AgentDojo rows against the local server: the deep figures are the
    scripted verdicts scored against the stored labels, on the same rows as the rules'."""
    from otel_safety.evaluation import datasets
    from otel_safety.evaluation.runner import run_eval

    cases = datasets.sample(datasets.load(shared_data, ["agentdojo", "xstest"]), 9)
    script = []
    for number in range(8):
        script.append(dimension_reply("unsafe" if number % 3 == 0 else "safe", "HARD_STOP"))
    script += [text_reply("garbage"), text_reply("garbage again")]  # the ninth fails
    db = str(tmp_path / "eval.duckdb")
    with FakeOpenAIServer(script) as server:
        report = run_eval(
            cases,
            db,
            resamples=20,
            deep={"deep_model": "judge-1", "deep_base_url": server.base_url, "deep_concurrency": 1},
        )
    assert report.deep is not None
    sent = [r["messages"][1]["content"] for r in server.requests]
    assert len(sent) == 10 and all("## Tool calls" in text for text in sent)  # agentdojo only
    with duckdb.connect(db, read_only=True) as con:
        pairs = con.execute(
            "SELECT l.detector, l.label, r.verdict FROM labels l JOIN deep_runs r "
            "USING (trace_id) WHERE l.source = 'external:agentdojo'"
        ).fetchall()
        assert con.execute("SELECT count(*) FROM deep_runs").fetchone() == (9,)
    rows = {row.detector: row for row in report.deep.rows}
    assert set(rows) == {d for d, _, _ in pairs} and rows
    for detector, row in rows.items():
        mine = [  # the failed analysis is no verdict: left out of the figures
            (label, verdict == "unsafe")
            for d, label, verdict in pairs
            if d == detector and verdict in ("safe", "unsafe")
        ]
        assert (row.deep.tp, row.deep.fp, row.deep.fn, row.deep.tn) == (
            sum(1 for lab, said in mine if lab and said),
            sum(1 for lab, said in mine if not lab and said),
            sum(1 for lab, said in mine if lab and not said),
            sum(1 for lab, said in mine if not lab and not said),
        )
        everything = report.row(detector, "agentdojo").counts  # the rules on all nine
        assert row.rule.tp <= everything.tp and row.rule.tn <= everything.tn
        assert row.errors == 1 and row.rule.rows == row.deep.rows == 8
        assert row.both.tp >= max(row.rule.tp, row.deep.tp)
    cost = report.deep.cost
    assert (cost.traces, cost.analysed, cost.errors) == (9, 8, 1)
    assert (cost.calls, cost.tokens) == (10, 150)
    assert cost.model_seconds > 0 and 0 < cost.wall_seconds < report.seconds
    assert cost.per_thousand()["calls"] == round(10 * 1000 / 9, 1)
    document = report.as_dict()["deep"]
    assert document["model"] == "judge-1" and document["cost"]["per_1000_traces"]["tokens"]
    assert "Deep cost: 9 traces sent, 8 analysed, 1 failed" in report.deep.text()


@pytest.mark.process
def test_eval_without_deep_prints_no_deep_section_whatever_the_environment(
    shared_data: Path, tmp_path: Path
) -> None:
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "OPENAI_"))}
    env.update(
        OTEL_SAFETY_DEEP="true",
        OTEL_SAFETY_DEEP_MODEL="judge-1",
        OTEL_SAFETY_DEEP_BASE_URL="http://127.0.0.1:9/v1",  # nothing listens: never asked
    )
    base = [sys.executable, "-m", "otel_safety.cli", "eval", "--data", str(shared_data)]
    done = subprocess.run(
        [
            *base,
            *("--db", str(tmp_path / "e.duckdb"), "--sample", "3", "--resamples", "5"),
            *("--datasets", "agentdojo", "--in-sample"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "Deep analysis" not in done.stdout and "Deep cost" not in done.stdout
    refused = subprocess.run(
        [*base, "--db", str(tmp_path / "f.duckdb"), "--deep", "--datasets", "agentdojo"],
        capture_output=True,
        text=True,
        timeout=300,
        env={k: v for k, v in env.items() if not k.startswith("OTEL_SAFETY_DEEP")},
        check=False,
    )
    assert refused.returncode == 1 and "OTEL_SAFETY_DEEP_BASE_URL" in refused.stderr


def test_shutdown_waits_only_so_long_and_counts_what_is_left(tmp_path: Path) -> None:
    replies = [delayed(3.0, dimension_reply()) for _ in range(3)]
    with FakeOpenAIServer(replies) as server:
        harness = Harness(tmp_path, server, deep_concurrency=1)
        for number in range(3):
            harness.run(agent_case(number))
        harness.engine.shutdown(timeout_millis=500)
        harness.writer.shutdown()
        stats = harness.engine.stats
        assert stats["deep_queued"] == 3
        assert stats["deep_unfinished_at_shutdown"] == 3  # one with the model, two queued
    assert harness.query("SELECT count(*) FROM deep_runs") == [(0,)]
    assert len(server.requests) == 1


def test_the_selector_picks_serious_and_uncertain_traces() -> None:
    from otel_safety.deep.select import Selector
    from otel_safety.model import EscalationLevel, Finding, Severity, Trajectory
    from otel_safety.pipeline import TraceEvaluation

    def evaluation(level: str, *findings: Finding) -> TraceEvaluation:
        return TraceEvaluation(
            trace_id="t" * 32,
            spans=[],
            reason="root_ended",
            findings=list(findings),
            level=EscalationLevel[level],
            trajectory=Trajectory(trace_id="t" * 32),
        )

    def finding(detector: str, score: float, detected: bool, **details: Any) -> Finding:
        return Finding(
            detector=detector,
            trace_id="t" * 32,
            score=score,
            threshold=0.5,
            detected=detected,
            severity=Severity.MEDIUM,
            details=details or None,
        )

    selector = Selector(
        Settings.resolve(environ={}, deep_detectors=["injection"], deep_uncertainty=0.1)
    )
    assert selector.why(evaluation("HUMAN_REVIEW")) == "level HUMAN_REVIEW"
    assert selector.why(evaluation("WARN", finding("injection", 0.9, True))) == (
        "detector injection"
    )
    assert selector.why(evaluation("NONE", finding("deception", 0.45, False))) == (
        "uncertain deception"
    )
    assert selector.why(evaluation("NONE", finding("deception", 0.2, False))) is None
    signalled = finding("drift", 0.1, False, signals={"uncertainty": 0.6})
    assert selector.why(evaluation("NONE", signalled)) == "uncertain drift"
    assert selector.why(evaluation("WARN", finding("deception", 0.95, True))) is None
    no_run = evaluation("HARD_STOP")
    no_run.trajectory = None
    assert selector.why(no_run) is None


def test_an_inline_deep_verdict_reaches_the_audit_log(tmp_path: Path) -> None:
    """guard.check_tool_call(deep=True) inside the tool's span: the model's reason is part
    of the signed verdict on the span, and the audit row the trace gives carries it."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    arguments = {"path": "/backups"}
    with FakeOpenAIServer([dimension_reply()]) as server:
        guard = _guard(server)
        with (
            tracer.start_as_current_span(
                "invoke_agent ops", attributes={"gen_ai.operation.name": "invoke_agent"}
            ),
            tracer.start_as_current_span(
                "execute_tool list_files",
                attributes={
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": "list_files",
                    "gen_ai.tool.call.arguments": json.dumps(arguments),
                },
            ),
        ):
            verdict = guard.check_tool_call("list_files", arguments, deep=True)
    assert verdict.blocked
    db = tmp_path / "audit.duckdb"
    engine = build_engine(
        Settings.resolve(environ={}, detectors=["tool_guard"]),
        [DuckDBStore(str(db), hold=True)],
        background=False,
    )
    engine.process(exporter.get_finished_spans())
    engine.shutdown()
    provider.shutdown()
    with duckdb.connect(str(db), read_only=True) as con:
        row = con.execute("SELECT verdict, source, rule_ids, reasons FROM audit").fetchone()
    assert row[:2] == ("BLOCK", "inline")
    assert "deep.analysis" in json.loads(row[2])
    assert any("deep.analysis: deleted (judge-1)" in reason for reason in json.loads(row[3]))


def test_deep_figures_leave_out_the_analyses_that_failed():
    """A failed analysis counted as "deep said safe": ten errors read as a 0.000 recall."""
    from otel_safety.evaluation.deep import DeepCost, DeepVerdicts, measure_deep

    case_of = {f"t{n}": Case(f"c{n}", "agentdojo", [], {"injection": n < 2}) for n in range(4)}
    verdicts = DeepVerdicts(unsafe={"t0": True, "t1": None, "t2": False, "t3": None})
    rules = {"t0": {"injection": False}, "t2": {"injection": True}}
    cost = DeepCost(4, 2, 2, 2, 0, 0.0, 0.0)
    [row] = measure_deep(case_of, rules, verdicts, {"injection"}, cost, "m", "v", 10, 0).rows
    assert row.errors == 2
    assert (row.deep.tp, row.deep.fp, row.deep.fn, row.deep.tn) == (1, 0, 0, 1)
    assert (row.rule.tp, row.rule.fp, row.rule.fn, row.rule.tn) == (0, 1, 1, 0)
