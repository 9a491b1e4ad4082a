"""Real parts for the sidecar tests: an instrumented agent, a next hop, `serve` as a process.

Everything listens on 127.0.0.1 only and is stopped by the `with` block that started it.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
from instrumented import (
    FINAL_ANSWER,
    SYSTEM_PROMPT,
    TOOL_ARGUMENTS,
    TOOL_NAME,
    USER_REQUEST,
    run_shell,
)
from loopback import LoopbackServer, QuietHandler
from needs import require
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2_grpc
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter

from otel_safety.otlp import spans_from_request

ROOT = Path(__file__).resolve().parent.parent

# A model's answer asking to run `rm -rf /`, in the GenAI output-messages form: what the
# tests send only as a log record, so that a span is judged on it only if the record is read.
RM_RF_OUTPUT = [
    {
        "role": "assistant",
        "parts": [
            {
                "type": "tool_call",
                "id": "call_1",
                "name": "run_shell",
                "arguments": {"command": "rm -rf /"},
            }
        ],
        "finish_reason": "tool_calls",
    }
]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# --- the observed application ---------------------------------------------------------------


def run_agent(
    exporter: SpanExporter, service: str = "repo-assistant", conversation: str | None = None
) -> None:
    """A pydantic-ai agent whose spans go out through `exporter` (a real OTLP exporter).

    Asked to summarise the README, it runs `rm -rf build`: scope escalation, HARD_STOP.
    `conversation` is the run's conversation id (`gen_ai.conversation.id`).
    """
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from otel_safety.integrations.pydantic_ai import instrumentation

    def play(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if not any(isinstance(m, ModelResponse) for m in messages):
            return ModelResponse(
                parts=[ToolCallPart(TOOL_NAME, dict(TOOL_ARGUMENTS), tool_call_id="c1")]
            )
        return ModelResponse(parts=[TextPart(FINAL_ANSWER)])

    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=100))
    try:
        agent = Agent(
            FunctionModel(play),
            name="repo-assistant",
            instructions=SYSTEM_PROMPT,
            tools=[run_shell],
            **instrumentation(provider),
        )
        assert agent.run_sync(USER_REQUEST, conversation_id=conversation).output == FINAL_ANSWER
        assert provider.force_flush(30_000)
    finally:
        provider.shutdown()


# --- the next hop ---------------------------------------------------------------------------


class _Recorder(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self) -> None:
        self.requests: list[ExportTraceServiceRequest] = []
        self.lock = threading.Lock()

    def Export(
        self, request: ExportTraceServiceRequest, context: Any
    ) -> ExportTraceServiceResponse:
        with self.lock:
            self.requests.append(request)
        return ExportTraceServiceResponse()


class _LogsRecorder(logs_service_pb2_grpc.LogsServiceServicer):
    def __init__(self) -> None:
        self.requests: list[ExportLogsServiceRequest] = []
        self.lock = threading.Lock()

    def Export(self, request: ExportLogsServiceRequest, context: Any) -> ExportLogsServiceResponse:
        with self.lock:
            self.requests.append(request)
        return ExportLogsServiceResponse()


class GrpcNextHop:
    """A plain OTLP/gRPC receiver (traces and logs) standing in for the collector after
    otel-safety."""

    def __init__(self) -> None:
        self._recorder = _Recorder()
        self._logs = _LogsRecorder()
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(self._recorder, self._server)
        logs_service_pb2_grpc.add_LogsServiceServicer_to_server(self._logs, self._server)
        self.port = self._server.add_insecure_port("127.0.0.1:0")

    def logs(self) -> list[ExportLogsServiceRequest]:
        with self._logs.lock:
            return list(self._logs.requests)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def spans(self) -> list[ReadableSpan]:
        with self._recorder.lock:
            requests = list(self._recorder.requests)
        return [span for request in requests for span in spans_from_request(request)]

    def __enter__(self) -> GrpcNextHop:
        self._server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.stop(None).wait(5)


class HttpNextHop:
    """A plain OTLP/HTTP (protobuf) receiver standing in for the next hop."""

    def __init__(self, delay: float = 0.0) -> None:
        """`delay`: seconds it takes before it answers (a slow hop)."""
        received: list[bytes] = []
        logs: list[bytes] = []
        self._received = received
        self._logs = logs

        class Handler(QuietHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                time.sleep(delay)
                if self.path.startswith("/v1/logs"):
                    logs.append(body)
                    answer = ExportLogsServiceResponse().SerializeToString()
                else:
                    received.append(body)
                    answer = ExportTraceServiceResponse().SerializeToString()
                self.reply(answer, "application/x-protobuf")

        self._server = LoopbackServer(Handler)

    @property
    def endpoint(self) -> str:
        return self._server.endpoint

    @property
    def requests(self) -> int:
        """Export requests received for spans."""
        return len(self._received)

    def spans(self) -> list[ReadableSpan]:
        return [
            span
            for body in list(self._received)
            for span in spans_from_request(ExportTraceServiceRequest.FromString(body))
        ]

    def logs(self) -> list[ExportLogsServiceRequest]:
        return [ExportLogsServiceRequest.FromString(body) for body in list(self._logs)]

    def __enter__(self) -> HttpNextHop:
        self._server.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.__exit__(*exc)


def run_command(*args: str) -> subprocess.CompletedProcess[str]:
    """`otel-safety ARGS` in a process of its own, as a person at another terminal runs it."""
    return subprocess.run(
        [sys.executable, "-m", "otel_safety.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def wait_for(condition: Any, timeout: float = 20.0, what: str = "condition") -> Any:
    """Poll until `condition()` is truthy; fail with `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


# --- `otel-safety serve` as a process -------------------------------------------------------

_GRPC_LINE = re.compile(r"OTLP/gRPC on (\S+)")
_HTTP_LINE = re.compile(r"OTLP/HTTP on (http\S+)/v1/traces")


class ServeProcess:
    """`otel-safety serve` in a child process; ports 0 by default, read from its output."""

    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        self.args = ["--grpc-port", "0", "--http-port", "0", *args]
        self.env = {**os.environ, **(env or {})}
        self.process: subprocess.Popen[str] | None = None
        self.lines: list[str] = []
        self.grpc_target = ""
        self.http_url = ""
        self.returncode: int | None = None

    def __enter__(self) -> ServeProcess:
        command = [sys.executable, "-m", "otel_safety.cli", "serve", *self.args]
        self.process = subprocess.Popen(
            command,
            cwd=ROOT,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        reader = threading.Thread(target=self._read, daemon=True)
        reader.start()
        try:
            wait_for(
                lambda: (
                    any(line.startswith("otel-safety serve: ready") for line in self.lines)
                    or self.process.poll() is not None
                ),
                timeout=60,
                what="serve to start",
            )
            if self.process.poll() is not None:
                raise AssertionError("serve exited early:\n" + self.output)
        except BaseException:
            self.stop()
            raise
        for line in self.lines:
            if match := _GRPC_LINE.search(line):
                self.grpc_target = match.group(1)
            if match := _HTTP_LINE.search(line):
                self.http_url = match.group(1)
        return self

    def _read(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def stop(self, timeout: float = 60) -> int:
        """SIGTERM (the orderly stop) and wait; kill only if it does not exit in time."""
        if self.process is None:
            return -1
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self.returncode = self.process.returncode
        return self.returncode

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextmanager
def rotel_collector(exporter_endpoint: str) -> Iterator[tuple[str, str]]:
    """The `rotel` OTLP collector from PyPI as a process: yields its gRPC target and HTTP URL."""
    try:
        import rotel
    except ImportError:
        require(False, "the rotel package")
    binary = Path(rotel.__file__).parent / "rotel-agent"
    require(binary.is_file(), "the rotel-agent binary inside the rotel package")
    grpc_port, http_port = free_port(), free_port()
    log = Path(os.environ.get("TMPDIR", "/tmp")) / f"rotel-{os.getpid()}-{grpc_port}.log"
    process = subprocess.Popen(
        [
            str(binary),
            "start",
            "--otlp-grpc-endpoint",
            f"127.0.0.1:{grpc_port}",
            "--otlp-http-endpoint",
            f"127.0.0.1:{http_port}",
            "--exporter",
            "otlp",
            "--otlp-exporter-endpoint",
            exporter_endpoint,
            "--otlp-exporter-protocol",
            "grpc",
            "--pid-file",
            str(log.with_suffix(".pid")),
            "--log-file",
            str(log),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_for(
            lambda: _listening(grpc_port) and _listening(http_port),
            timeout=30,
            what="rotel to listen",
        )
        yield f"127.0.0.1:{grpc_port}", f"http://127.0.0.1:{http_port}"
    finally:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)
        log.unlink(missing_ok=True)
        log.with_suffix(".pid").unlink(missing_ok=True)


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.2)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def self_signed_certificate(folder: Path) -> tuple[Path, Path]:
    """(certificate, key) for 127.0.0.1 and localhost, made by openssl, valid a day."""
    require(shutil.which("openssl") is not None, "openssl (Debian package openssl)")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            "-keyout", str(key), "-out", str(cert), "-subj", "/CN=localhost",
            "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert, key
