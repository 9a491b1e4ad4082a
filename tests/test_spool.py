"""The write-ahead spool: on disk before acknowledged, released once stored, read back after
a crash; and `serve` killed with SIGKILL losing no acknowledged span."""

from __future__ import annotations

import json
import re
import time
from types import SimpleNamespace

import duckdb
import httpx
import pytest
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, ResourceLogs, ScopeLogs
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from sidecar_support import RM_RF_OUTPUT, HttpNextHop, ServeProcess, wait_for

from otel_safety.config import Settings
from otel_safety.logs import OPERATION_DETAILS
from otel_safety.sidecar import Sidecar, SidecarOptions
from otel_safety.sidecar.forward_spool import SpooledForwarder
from otel_safety.sidecar.metrics import Metrics, ProblemLog
from otel_safety.spool import SEGMENT_SUFFIX, Record, Spool, SpoolBusy, SpoolFull


def segments(folder) -> list[str]:
    return sorted(p.name for p in folder.glob(f"*{SEGMENT_SUFFIX}"))


def test_what_is_not_released_is_read_back_by_the_next_spool(tmp_path):
    spool = Spool(tmp_path, segment_bytes=64)
    records = [spool.append(f"request {n}".encode() * 3) for n in range(5)]
    assert records[0] == Record(1, 0) and len(segments(tmp_path)) > 1  # rolled at 64 bytes
    spool.release(records[0])
    spool.release(records[3])
    assert spool.records == 3
    spool.close()
    again = Spool(tmp_path)
    left = list(again.leftovers())
    assert [payload for _, payload in left] == [f"request {n}".encode() * 3 for n in (1, 2, 4)]
    for record, _ in left:
        again.release(record)
    assert segments(tmp_path) == [] and again.records == 0 and again.bytes == 0
    again.close()


def _die(spool: Spool) -> None:
    """What a SIGKILL leaves: files as written, nothing closed in order, the lock let go."""
    if spool._handle is not None:
        spool._handle.close()
    spool._lock_file.close()


def test_a_crash_reads_back_only_what_was_not_released(tmp_path):
    """Releases used to live in memory until the open segment filled (a quarter of the
    spool), so a crash sent back everything stored since it began: judged and forwarded a
    second time."""
    spool = Spool(tmp_path)
    records = [spool.append(f"request {n}".encode()) for n in range(5)]
    for record in (records[0], records[2], records[3]):
        spool.release(record)
    _die(spool)
    again = Spool(tmp_path)
    left = list(again.leftovers())
    assert [payload for _, payload in left] == [b"request 1", b"request 4"]
    assert again.records == 2
    for record, _ in left:
        again.release(record)
    _die(again)  # a second crash, during the replay: nothing comes back a third time
    third = Spool(tmp_path)
    assert list(third.leftovers()) == [] and segments(tmp_path) == []
    assert list(tmp_path.glob("*.released")) == []
    third.close(remove_if_empty=True)
    assert not tmp_path.exists()


def test_release_notes_whose_segment_went_are_not_given_to_a_new_one(tmp_path):
    (tmp_path / f"{1:012d}.released").write_bytes(b"\x00\x00\x00\x00")  # segment 1 is gone
    spool = Spool(tmp_path)
    record = spool.append(b"new")
    assert record == Record(1, 0)
    _die(spool)
    assert [payload for _, payload in Spool(tmp_path).leftovers()] == [b"new"]


def test_a_spool_closed_with_nothing_owed_can_take_its_folder_with_it(tmp_path):
    done, owing, given = tmp_path / "done", tmp_path / "owing", tmp_path / "given"
    spool = Spool(done)
    spool.release(spool.append(b"stored"))
    spool.close(remove_if_empty=True)
    assert not done.exists()
    spool = Spool(owing)
    spool.append(b"not stored yet")
    spool.close(remove_if_empty=True)
    assert segments(owing)  # owed: kept for the next start
    spool = Spool(given)
    (given / "notes.txt").write_text("not the spool's")
    spool.close(remove_if_empty=True)
    assert (given / "notes.txt").exists()
    Spool(tmp_path / "kept").close()
    assert (tmp_path / "kept").is_dir()  # without the flag, as before


def test_a_record_cut_short_by_a_crash_is_ignored(tmp_path, caplog):
    spool = Spool(tmp_path)
    for n in range(3):
        spool.append(b"x" * 100 + bytes([n]))
    spool.close()
    (path,) = tmp_path.glob(f"*{SEGMENT_SUFFIX}")
    path.write_bytes(path.read_bytes()[:-10])  # the last append never reached the disk whole
    left = list(Spool(tmp_path).leftovers())
    assert [payload[-1] for _, payload in left] == [0, 1]
    assert "cut short" in caplog.text


def test_the_spool_is_bounded_and_held_by_one_process(tmp_path):
    spool = Spool(tmp_path, max_bytes=300)
    spool.append(b"a" * 200)
    with pytest.raises(SpoolFull, match="holds 208 of 300 bytes"):
        spool.append(b"b" * 200)
    with pytest.raises(SpoolBusy):
        Spool(tmp_path)
    spool.close()
    Spool(tmp_path).close()  # free again once closed


def _spans(traces: int, per_trace: int, rootless: int) -> list[ReadableSpan]:
    """GenAI spans of `traces` agent runs, plus `rootless` runs whose root never arrives."""
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("spool-test")
    for number in range(traces + rootless):
        parent = None
        if number >= traces:  # a parent that lives in another process and never ends here
            parent = trace.set_span_in_context(
                trace.NonRecordingSpan(
                    trace.SpanContext(
                        trace_id=0xABC000 + number,
                        span_id=0xDEF000 + number,
                        is_remote=True,
                        trace_flags=trace.TraceFlags(1),
                    )
                )
            )
        with tracer.start_as_current_span(
            "invoke_agent", context=parent, attributes={"gen_ai.operation.name": "invoke_agent"}
        ):
            for call in range(per_trace - 1):
                with tracer.start_as_current_span(
                    "execute_tool",
                    attributes={
                        "gen_ai.operation.name": "execute_tool",
                        "gen_ai.tool.name": "read_file",
                        "gen_ai.tool.call.arguments": f'{{"path": "notes-{call}.txt"}}',
                    },
                ):
                    pass
    provider.shutdown()
    return list(memory.get_finished_spans())


def _stored(db: str) -> set[tuple[str, str]]:
    with duckdb.connect(db, read_only=True) as con:
        return set(con.execute("SELECT trace_id, span_id FROM spans").fetchall())


def _stored_if_free(db: str) -> set[tuple[str, str]]:
    """What the store holds, or nothing while it is missing or its writer holds it."""
    try:
        return _stored(db)
    except duckdb.Error:
        return set()


@pytest.mark.process
def test_serve_killed_with_sigkill_loses_no_acknowledged_span(tmp_path):
    db = str(tmp_path / "agents.duckdb")
    spans = _spans(traces=60, per_trace=5, rootless=20)
    acknowledged: set[tuple[str, str]] = set()
    # Traces wait a minute for their root: at the kill, most are still in memory only.
    serve = ServeProcess("--db", db, "--decision-wait", "60", "--grpc-port", "off")
    with serve:
        exporter = HttpExporter(endpoint=f"{serve.http_url}/v1/traces")
        for start in range(0, len(spans), 40):
            batch = spans[start : start + 40]
            assert exporter.export(batch) is SpanExportResult.SUCCESS
            acknowledged |= {
                (f"{s.context.trace_id:032x}", f"{s.context.span_id:016x}") for s in batch
            }
        exporter.shutdown()
        serve.process.kill()  # SIGKILL: no drain, no flush
        serve.process.wait(10)
    assert list((tmp_path / "agents.duckdb.spool").glob(f"*{SEGMENT_SUFFIX}"))
    with ServeProcess("--db", db, "--grpc-port", "off") as again:
        wait_for(
            lambda: "queued again for judging" in again.output, what="the spool to be replayed"
        )
        assert again.stop() == 0, again.output
    assert acknowledged <= _stored(db)
    assert len(acknowledged) == len(spans)
    assert not (tmp_path / "agents.duckdb.spool").exists()  # all written, all released


@pytest.mark.process
def test_serve_killed_after_its_work_was_done_judges_and_forwards_nothing_twice(tmp_path):
    """What was stored and forwarded before a SIGKILL is not sent back at the restart: the
    next hop got every span three times, and the traces were counted judged again."""
    db = str(tmp_path / "agents.duckdb")
    spans = _spans(traces=4, per_trace=2, rootless=0)
    with HttpNextHop() as hop:
        forward = ("--forward", hop.endpoint, "--forward-protocol", "http/protobuf")
        serve = ServeProcess("--db", db, "--grpc-port", "off", "--decision-wait", "1", *forward)
        with serve:
            exporter = HttpExporter(endpoint=f"{serve.http_url}/v1/traces")
            assert exporter.export(spans) is SpanExportResult.SUCCESS
            exporter.shutdown()

            def done() -> bool:
                health = httpx.get(f"{serve.http_url}/health", timeout=5).json()
                owed = health["spool_records"] + health["forward_spool_records"]
                return owed == 0 and len(hop.spans()) == len(spans)

            wait_for(done, timeout=60, what="every span stored and forwarded")
            serve.process.kill()  # SIGKILL: the spools' segments are still open
            serve.process.wait(10)
        with ServeProcess("--db", db, "--grpc-port", "off", *forward) as again:
            assert again.stop() == 0, again.output
        assert (
            "queued again for judging" not in again.output and "did not forward" not in again.output
        )
        assert len(hop.spans()) == len(spans)
    assert len(_stored(db)) == len(spans)


@pytest.mark.process
def test_a_store_held_by_another_process_drops_nothing(tmp_path, span_factory):
    """While another process holds the store, traces wait in memory up to what the store may
    hold; beyond it the receiver refuses new requests (retryably) instead of dropping any,
    and once the store is free the clients' retries are taken and everything is stored."""
    import subprocess
    import sys

    import httpx
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    from otel_safety.config import Settings
    from otel_safety.sidecar import Sidecar, SidecarOptions

    db = str(tmp_path / "store.duckdb")
    settings = Settings.resolve(
        environ={}, db_path=db, detectors=["scope_escalation"], decision_wait=0.1
    )
    runs = [span_factory.agent_run(prompt=f"task {n}") for n in range(6)]

    def post(sidecar, run) -> int:
        return httpx.post(
            f"{sidecar.http_url}/v1/traces",
            content=encode_spans(run).SerializeToString(),
            headers={"Content-Type": "application/x-protobuf"},
        ).status_code

    with Sidecar(settings, SidecarOptions(grpc_port=None, http_port=0)) as sidecar:
        sidecar._store_sink.max_pending = 2  # what memory may hold while the store is away
        holder = subprocess.Popen(
            [
                sys.executable,
                "-c",
                f"import duckdb, sys; c = duckdb.connect({db!r}); print('held', flush=True); "
                "sys.stdin.read()",
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        refused = []
        try:
            assert holder.stdout.readline().strip() == "held"
            for run in runs:
                wait_for(lambda: sidecar.engine.buffer.span_count == 0, what="judging")
                if post(sidecar, run) != 200:
                    refused.append(run)
                time.sleep(0.3)  # the store tries (and fails) to write what was judged
            assert refused, "the receiver should push back while the store is held"
            assert sidecar.health()[1]["traces_store_dropped"] == 0
        finally:
            holder.stdin.close()
            holder.wait(10)
        for run in refused:  # what a client's retry does
            wait_for(lambda run=run: post(sidecar, run) == 200, what="the retry to be taken")
    assert sidecar.health()[1]["traces_store_dropped"] == 0
    assert segments(tmp_path / "store.duckdb.spool") == []
    with duckdb.connect(db, read_only=True) as con:
        stored = {row[0] for row in con.execute("SELECT DISTINCT trace_id FROM traces").fetchall()}
    assert stored == {f"{run[0].context.trace_id:032x}" for run in runs}


@pytest.mark.process
def test_a_next_hop_that_is_down_gets_every_span_when_it_returns(tmp_path, span_factory):
    """The hop refuses connections for a while: annotated spans wait on disk (counted), and
    all arrive once it listens; nothing waits on it but the sender."""
    import socket
    import threading
    from http.server import ThreadingHTTPServer

    import httpx
    from loopback import QuietHandler
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
        ExportTraceServiceResponse,
    )

    from otel_safety.config import Settings
    from otel_safety.otlp import spans_from_request
    from otel_safety.sidecar import Sidecar, SidecarOptions

    with socket.socket() as probe:  # a port nothing listens on, for now
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    received: list[bytes] = []

    class Hop(QuietHandler):
        def do_POST(self) -> None:
            received.append(self.rfile.read(int(self.headers["Content-Length"])))
            self.reply(ExportTraceServiceResponse().SerializeToString(), "application/x-protobuf")

    settings = Settings.resolve(
        environ={}, db_path=str(tmp_path / "s.duckdb"), detectors=["scope_escalation"]
    )
    options = SidecarOptions(
        grpc_port=None,
        http_port=0,
        forward_endpoint=f"http://127.0.0.1:{port}",
        forward_protocol="http/protobuf",
    )
    runs = [span_factory.agent_run(prompt=f"task {n}") for n in range(5)]
    with Sidecar(settings, options) as sidecar:
        for run in runs:
            reply = httpx.post(
                f"{sidecar.http_url}/v1/traces",
                content=encode_spans(run).SerializeToString(),
                headers={"Content-Type": "application/x-protobuf"},
            )
            assert reply.status_code == 200
        wait_for(
            lambda: (
                sidecar.health()[1]["forward_spool_records"] >= 1
                and sidecar.metrics.total("spans_forward_retried") > 0
            ),
            what="the hop's outage to be noticed",
        )
        assert "otel_safety_sidecar_forward_spool_records" in sidecar.metrics_text()
        hop = ThreadingHTTPServer(("127.0.0.1", port), Hop)
        thread = threading.Thread(target=hop.serve_forever, daemon=True)
        thread.start()
        try:
            wait_for(
                lambda: sidecar.health()[1]["forward_spool_records"] == 0,
                timeout=60,
                what="the hop to take everything",
            )
        finally:
            hop.shutdown()
            hop.server_close()
            thread.join(5)
    forwarded = {
        (span.context.trace_id, span.context.span_id)
        for body in received
        for span in spans_from_request(ExportTraceServiceRequest.FromString(body))
    }
    assert forwarded == {(s.context.trace_id, s.context.span_id) for run in runs for s in run}
    assert sidecar.metrics.total("spans_forward_failed") == 0


@pytest.mark.process
def test_a_drain_cut_short_by_its_timeout_is_finished_at_the_next_start(
    tmp_path, span_factory, caplog
):
    """SIGTERM's drain has a deadline; what it did not write is said at the stop and judged
    when serve starts again on the store."""
    import httpx
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    from otel_safety.config import Settings
    from otel_safety.sidecar import Sidecar, SidecarOptions

    settings = Settings.resolve(
        environ={}, db_path=str(tmp_path / "s.duckdb"), decision_wait=3600
    )  # every detector: judging the backlog takes a while
    options = SidecarOptions(grpc_port=None, http_port=0, drain_timeout=0.05)
    children = [span_factory.agent_run(prompt=f"task {n}")[0] for n in range(400)]
    with Sidecar(settings, options) as first:  # the roots never come: all wait in the buffer
        for start in range(0, len(children), 100):
            reply = httpx.post(
                f"{first.http_url}/v1/traces",
                content=encode_spans(children[start : start + 100]).SerializeToString(),
                headers={"Content-Type": "application/x-protobuf"},
            )
            assert reply.status_code == 200
        wait_for(lambda: len(first.engine.buffer) == 400, what="the backlog to be buffered")
    assert "are judged at the next start" in caplog.text
    assert re.search(r"\b[1-9]\d* acknowledged requests", caplog.text)  # how many, said
    with Sidecar(settings, SidecarOptions(grpc_port=None, http_port=0)):
        pass  # replays the spool, and this time the drain has its 30 s
    with duckdb.connect(settings.db_path, read_only=True) as con:
        stored = set(con.execute("SELECT trace_id, span_id FROM spans").fetchall())
    assert {(f"{s.context.trace_id:032x}", f"{s.context.span_id:016x}") for s in children} <= (
        stored
    )


@pytest.mark.process
def test_spans_after_their_traces_first_write_keep_their_record(tmp_path, span_factory):
    """A request holding the rest of a trace, taken after the root's but before the root's
    spans were written, was released with them while its own spans still waited to be
    judged: once its segment went, a crash lost them."""
    import httpx
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    from otel_safety.config import Settings
    from otel_safety.sidecar import Sidecar, SidecarOptions

    db = str(tmp_path / "store.duckdb")
    settings = Settings.resolve(environ={}, db_path=db, detectors=["injection"], decision_wait=60)
    spans = span_factory.agent_run()
    root = [s for s in spans if s.parent is None]
    rest = [s for s in spans if s.parent is not None]
    with Sidecar(settings, SidecarOptions(grpc_port=None, http_port=0)) as sidecar:
        for part in (root, rest):  # back to back, before the root's trace is written
            answer = httpx.post(
                f"{sidecar.http_url}/v1/traces",
                content=encode_spans(part).SerializeToString(),
                headers={"Content-Type": "application/x-protobuf"},
            )
            assert answer.status_code == 200
        wait_for(lambda: _stored_if_free(db), what="the root's trace to be written")
        assert sidecar.spool is not None and sidecar.spool.records == 1  # the rest is owed
    assert len(_stored(db)) == 2  # and written at the drain


def test_a_spool_smaller_than_a_segment_frees_what_is_released(tmp_path):
    """Under --spool-max-mib 2 every request was refused once 2 MiB had passed through:
    the open segment's released records counted against the budget until 16 MiB."""
    spool = Spool(tmp_path / "spool", max_bytes=100_000, sync=False)
    for _ in range(100):
        spool.release(spool.append(b"x" * 20_000))
    spool.close()


_FILE_SIZE_LIMITED = """
import resource, signal, sys
from otel_safety.spool import Spool
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
spool = Spool(sys.argv[1])
soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, hard))
taken = 0
for _ in range(5):
    try:
        spool.append(b"a" * 30_000)
        taken += 1
    except OSError:
        break
resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))  # room again: taken as usual
for _ in range(2):
    spool.append(b"b" * 30_000)
    taken += 1
print(taken)
"""


@pytest.mark.process
def test_a_write_cut_short_by_a_full_disk_costs_no_record_after_it(tmp_path):
    """A failed append left its partial bytes in the segment and the next appends after
    them: reading back stopped at the torn record and lost every acknowledged one behind."""
    import subprocess
    import sys

    folder = tmp_path / "spool"
    done = subprocess.run(
        [sys.executable, "-c", _FILE_SIZE_LIMITED, str(folder)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    taken = int(done.stdout)
    assert taken == 5  # three before the limit, two after it
    again = Spool(folder, sync=False)
    payloads = [payload for _, payload in again.leftovers()]
    again.close()
    assert [p[:1] for p in payloads] == [b"a"] * 3 + [b"b"] * 2


def test_a_spool_that_cannot_be_had_leaves_no_store_and_says_which_option(tmp_path):
    from otel_safety.config import Settings
    from otel_safety.sidecar import Sidecar, SidecarOptions

    db = tmp_path / "store.duckdb"
    (tmp_path / "store.duckdb.spool").write_text("a file where the folder goes")
    settings = Settings.resolve(environ={}, db_path=str(db), detectors=["injection"])
    with pytest.raises(ValueError, match=r"cannot use a spool folder: .*--spool DIR"):
        Sidecar(settings, SidecarOptions(grpc_port=None, http_port=0))
    assert not db.exists()


@pytest.mark.process
def test_what_another_serve_left_in_its_folder_is_judged_by_the_one_that_starts(
    tmp_path, span_factory
):
    """Two serves on one store, both killed: the one started again took `<db>.spool` and
    left `<db>.spool-2`, acknowledged spans and all, to nobody."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    from otel_safety.config import Settings
    from otel_safety.sidecar import Sidecar, SidecarOptions

    db = str(tmp_path / "store.duckdb")
    spans = span_factory.agent_run()
    left = Spool(f"{db}.spool-2")  # what the second serve had acknowledged, not written
    left.append(encode_spans(spans).SerializeToString())
    left.close()
    settings = Settings.resolve(environ={}, db_path=db, detectors=["injection"])
    with Sidecar(settings, SidecarOptions(grpc_port=None, http_port=0)):
        pass  # its start judges what the spool holds
    assert len(_stored(db)) == len(spans)
    assert not (tmp_path / "store.duckdb.spool-2").exists()


def _chat_without_its_root() -> tuple[ReadableSpan, ExportLogsServiceRequest]:
    """A chat span that carries no content, and the log request that does: the model asking
    for `rm -rf /`, as an instrumentation sends it with content capture set to events. Its
    root (the agent run) is never sent, so its trace waits out the decision wait."""
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("spool-test")
    with (
        tracer.start_as_current_span("agent run"),
        tracer.start_as_current_span(
            "chat fake", attributes={"gen_ai.operation.name": "chat"}
        ) as chat,
    ):
        ids = chat.get_span_context()
    provider.shutdown()
    record = LogRecord(
        event_name=OPERATION_DETAILS,
        trace_id=ids.trace_id.to_bytes(16, "big"),
        span_id=ids.span_id.to_bytes(8, "big"),
        attributes=[
            KeyValue(key="gen_ai.operation.name", value=AnyValue(string_value="chat")),
            KeyValue(
                key="gen_ai.output.messages",
                value=AnyValue(string_value=json.dumps(RM_RF_OUTPUT)),
            ),
        ],
    )
    request = ExportLogsServiceRequest(
        resource_logs=[ResourceLogs(scope_logs=[ScopeLogs(log_records=[record])])]
    )
    [span] = [s for s in memory.get_finished_spans() if s.name == "chat fake"]
    return span, request


def _post_logs(url: str, request: ExportLogsServiceRequest) -> None:
    answer = httpx.post(
        f"{url}/v1/logs",
        content=request.SerializeToString(),
        headers={"Content-Type": "application/x-protobuf"},
        timeout=10,
    )
    assert answer.status_code == 200, answer.text


@pytest.mark.process
def test_serve_killed_with_sigkill_keeps_the_content_its_log_records_carried(tmp_path):
    """An acknowledged log request is on disk too: after a SIGKILL, the GenAI event it held
    is back with its span, so the trace is judged on the content, not without it."""
    db = str(tmp_path / "agents.duckdb")
    span, logs = _chat_without_its_root()
    serve = ServeProcess("--db", db, "--decision-wait", "60", "--grpc-port", "off")
    with serve:
        _post_logs(serve.http_url, logs)
        exporter = HttpExporter(endpoint=f"{serve.http_url}/v1/traces")
        assert exporter.export([span]) is SpanExportResult.SUCCESS
        exporter.shutdown()
        serve.process.kill()  # SIGKILL: no drain, no flush
        serve.process.wait(10)
    with ServeProcess("--db", db, "--grpc-port", "off", "--decision-wait", "1") as again:
        wait_for(lambda: _stored_if_free(db), what="the replayed trace to be written")
        assert again.stop() == 0, again.output
    with duckdb.connect(db, read_only=True) as con:
        flagged = con.execute(
            "SELECT s.name, f.escalation_level FROM findings f "
            "JOIN spans s USING (trace_id, span_id) WHERE f.detector = 'tool_guard' AND f.detected"
        ).fetchall()
    assert flagged == [("chat fake", "HARD_STOP")], again.output
    assert not (tmp_path / "agents.duckdb.spool").exists()  # the log request was released too


def test_a_log_request_whose_spans_never_come_is_let_go_from_the_spool(tmp_path):
    """A GenAI event whose span never arrives is let go by the engine after the decision
    wait; its log request then leaves the spool, instead of being replayed at every start."""
    settings = Settings.resolve(
        environ={},
        db_path=str(tmp_path / "store.duckdb"),
        detectors=["tool_guard"],
        decision_wait=0.5,
        detection="thread",
    )
    _, logs = _chat_without_its_root()
    with Sidecar(settings, SidecarOptions(grpc_port=None, http_port=0)) as sidecar:
        _post_logs(sidecar.http_url, logs)
        assert sidecar.spool is not None
        assert sidecar.spool.records == 1  # on disk before the answer
        wait_for(lambda: sidecar.spool.records == 0, what="the log request to be let go")
        assert sidecar.engine.stats["log_events_unmatched"] == 1


def test_a_spool_of_more_log_events_than_the_queue_holds_is_replayed_without_a_loss(tmp_path):
    """A crash under load leaves many log requests in the spool. Replayed in the order they
    came, each waiting for room in the engine's queue, every event meets its span: each
    trace is judged on its content (the model's `rm -rf /`), none without it."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    from otel_safety.sidecar.spooling import LOG_REQUEST_TAG

    db = str(tmp_path / "store.duckdb")
    traces = 40
    left = Spool(f"{db}.spool")  # what a killed serve had acknowledged and not written
    for _ in range(traces):
        span, logs = _chat_without_its_root()
        left.append(encode_spans([span]).SerializeToString())
        left.append(LOG_REQUEST_TAG + logs.SerializeToString())
    left.close()
    settings = Settings.resolve(
        environ={},
        db_path=db,
        detectors=["tool_guard"],
        decision_wait=0.5,
        queue_size=4,  # ten times fewer than the events waiting
        detection="thread",
    )
    with Sidecar(settings, SidecarOptions(grpc_port=None, http_port=0)) as sidecar:
        wait_for(lambda: sidecar.spool.records == 0, what="every replayed request written")
        assert sidecar.engine.stats["log_events_dropped"] == 0
    with duckdb.connect(db, read_only=True) as con:
        flagged = con.execute(
            "SELECT count(DISTINCT trace_id) FROM findings "
            "WHERE detector = 'tool_guard' AND detected AND escalation_level = 'HARD_STOP'"
        ).fetchone()
    assert flagged == (traces,)


def _forwarder(folder, exporter) -> SpooledForwarder:
    return SpooledForwarder(exporter, Spool(folder, sync=False), Metrics(), ProblemLog())


def test_small_batches_waiting_in_the_spool_reach_the_hop_merged(tmp_path, span_factory):
    """A backlog of small requests drained at one round trip each: at 0.5 s a trip, 10 spans
    a second, slower than a busy app sends them."""
    runs = [span_factory.agent_run(prompt=f"task {n}") for n in range(5)]
    earlier = Spool(tmp_path / "forward", sync=False)
    for run in runs:
        earlier.append(encode_spans(run).SerializeToString())
    earlier.close()
    with HttpNextHop() as hop:
        forwarder = _forwarder(tmp_path / "forward", HttpExporter(f"{hop.endpoint}/v1/traces"))
        try:
            wait_for(lambda: forwarder.waiting == 0, what="the backlog to be sent")
        finally:
            forwarder.shutdown()
        assert hop.requests == 1
        assert len(hop.spans()) == sum(len(run) for run in runs)


def test_a_hop_slower_than_the_exporters_timeout_is_waited_for_longer(
    tmp_path, span_factory, caplog
):
    """Asked again after each timeout, the hop received the batch every time and answered
    too late every time: forwarding stalled for good, and the hop got duplicates."""
    run = span_factory.agent_run(prompt="task")
    with HttpNextHop(delay=0.6) as hop:

        def exporter_for(timeout: float) -> HttpExporter:
            return HttpExporter(f"{hop.endpoint}/v1/traces", timeout=timeout)

        forwarder = SpooledForwarder(
            exporter_for(0.3),
            Spool(tmp_path / "forward", sync=False),
            Metrics(),
            ProblemLog(),
            rebuild=exporter_for,
            timeout=0.3,
        )
        try:
            forwarder.write([SimpleNamespace(spans=run)])
            wait_for(lambda: forwarder.waiting == 0, timeout=30, what="the slow hop to answer")
        finally:
            forwarder.shutdown()
        assert forwarder.timeout >= 0.6
        assert "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT" in caplog.text
        assert {s.context.span_id for s in hop.spans()} == {s.context.span_id for s in run}


@pytest.mark.process
def test_a_stop_that_leaves_acknowledged_requests_unwritten_exits_75(tmp_path):
    """It exited 0 with the work in the spool: a deploy script could not tell it from a clean
    stop."""
    db = str(tmp_path / "agents.duckdb")
    serve = ServeProcess("--db", db, "--grpc-port", "off", "--drain-seconds", "3")
    with serve:
        held = wait_for(lambda: _hold(db), what="the store to be free to hold")
        try:
            exporter = HttpExporter(endpoint=f"{serve.http_url}/v1/traces")
            assert exporter.export(_spans(traces=2, per_trace=2, rootless=0)) is (
                SpanExportResult.SUCCESS
            )
            exporter.shutdown()

            def health() -> dict:
                return httpx.get(f"{serve.http_url}/health", timeout=5).json()

            held_up = wait_for(lambda: health()["store_failing"] == 1 and health(), what="it said")
            assert held_up["store_error"] and held_up["store_waiting_traces"] >= 1
            assert serve.stop() == 75, serve.output
        finally:
            held.close()
    assert "judged at the next start" in serve.output
    with ServeProcess("--db", db, "--grpc-port", "off") as again:
        assert again.stop() == 0, again.output
    assert len(_stored(db)) == 4


def _hold(db: str) -> duckdb.DuckDBPyConnection | None:
    """The store opened for writing, which locks every other process out; None while its
    writer has it open."""
    try:
        return duckdb.connect(db)
    except duckdb.Error:
        return None


def test_the_spool_is_readable_by_its_owner_alone(tmp_path):
    """It holds requests as clients sent them, secrets and all, before any masking: its
    segments were readable by every user of the host."""
    spool = Spool(tmp_path / "spool", sync=False)
    try:
        spool.append(b"Authorization: Bearer 9f8e7d6c5b4a39281706f5e4d3c2b1a0")
    finally:
        spool.close()
    [segment] = (tmp_path / "spool").glob(f"*{SEGMENT_SUFFIX}")
    assert segment.stat().st_mode & 0o077 == 0
    assert (tmp_path / "spool").stat().st_mode & 0o077 == 0
