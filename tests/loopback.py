"""A real HTTP server on 127.0.0.1 for tests, always stopped by the `with` block that started it."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class QuietHandler(BaseHTTPRequestHandler):
    """Request handler that keeps test output clean."""

    def log_message(self, *args: object) -> None:
        pass

    def reply(self, body: bytes, content_type: str, status: int = 200) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class LoopbackServer:
    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> LoopbackServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)


class MetricsReceiver(LoopbackServer):
    """An OTLP/HTTP metrics receiver: keeps every export request sent to /v1/metrics."""

    def __init__(self) -> None:
        from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
            ExportMetricsServiceRequest,
            ExportMetricsServiceResponse,
        )

        received: list[ExportMetricsServiceRequest] = []
        answer = ExportMetricsServiceResponse().SerializeToString()

        class Receiver(QuietHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if self.path == "/v1/metrics":
                    received.append(ExportMetricsServiceRequest.FromString(body))
                self.reply(answer, "application/x-protobuf")

        super().__init__(Receiver)
        self.received = received

    def last_values(self) -> dict[str, float]:
        """Each metric's value in the last request naming it, summed over its points."""
        last: dict[str, float] = {}
        for request in self.received:
            for resource in request.resource_metrics:
                for scope in resource.scope_metrics:
                    for metric in scope.metrics:
                        points = metric.sum.data_points or metric.gauge.data_points
                        last[metric.name] = sum(p.as_int or p.as_double for p in points)
        return last
