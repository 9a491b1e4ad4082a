"""Run the dashboard app with uvicorn in a thread: for `otel-safety dashboard` and beside
`serve` in the same process (`serve --dashboard`)."""

from __future__ import annotations

import threading
import time

from otel_safety.dashboard.app import DashboardOptions, create_app


class DashboardServer:
    """`start()` binds and returns once it listens; `stop()` lets open requests finish."""

    def __init__(
        self,
        options: DashboardOptions,
        host: str = "127.0.0.1",
        port: int = 8050,
        tls: tuple[str, str] | None = None,
    ):
        """`tls`: (certificate, key) files, as `serve` is given them: the dashboard then
        speaks HTTPS, so the token it shares with `serve` never travels in the clear."""
        import uvicorn

        config = uvicorn.Config(
            create_app(options),
            host=host,
            port=port,
            log_level="warning",
            lifespan="off",
            access_log=False,
            server_header=False,
            ssl_certfile=tls[0] if tls else None,
            ssl_keyfile=tls[1] if tls else None,
        )
        self.scheme = "https" if tls else "http"
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, name="otel-safety-dashboard", daemon=True
        )
        self.host = host

    def start(self, timeout: float = 15.0) -> None:
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive():
                raise OSError(f"the dashboard could not listen on {self.host} (port in use?)")
            if time.monotonic() > deadline:
                raise OSError("the dashboard did not start in time")
            time.sleep(0.02)

    @property
    def port(self) -> int:
        return self._server.servers[0].sockets[0].getsockname()[1]

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"

    def stop(self, timeout: float = 10.0) -> None:
        self._server.should_exit = True
        self._thread.join(timeout)
