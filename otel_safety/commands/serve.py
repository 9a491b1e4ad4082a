"""`otel-safety serve`: the OTLP receiver that judges, stores and forwards spans."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path
from typing import Any

from otel_safety.analysis.patterns.datafiles import data_folder_line
from otel_safety.calibration.file import in_use
from otel_safety.commands.dashboard import add_listen_options, dashboard_options, read_token
from otel_safety.commands.options import add_db, add_detectors, add_workers, detector_keys
from otel_safety.commands.stopping import StopSignals
from otel_safety.config import PORT_OFF, Settings, from_environment
from otel_safety.sidecar.forward import PROTOCOLS, check_endpoint
from otel_safety.sidecar.ports import check_host, ensure_free
from otel_safety.sidecar.server import Sidecar, SidecarOptions
from otel_safety.sidecar.store_claim import claim_store

DEFAULT_DB = Settings.model_fields["db_path"].default
MIB = 1024 * 1024
EXIT_UNFINISHED = 75  # EX_TEMPFAIL: stopped with acknowledged work left for the next start


def add_commands(subparsers: Any) -> None:
    serve = subparsers.add_parser(
        "serve",
        help="receive OTLP traces (gRPC and HTTP), judge, store and forward them",
        description="Run otel-safety as an OTLP trace receiver, for a Collector or any OTLP "
        "exporter to send to. Spans go through the same pipeline as the in-process processor "
        "(trace buffer, detectors, annotation), land in the DuckDB store (or a DuckLake) and, "
        "with --forward, continue annotated to a next hop. An option whose help names an "
        "environment variable [in brackets] also reads it; the pipeline reads the usual "
        "OTEL_SAFETY_* settings (OTEL_SAFETY_DETECTORS, OTEL_SAFETY_DECISION_WAIT, "
        "OTEL_SAFETY_QUEUE_SIZE, ...).",
        epilog="Endpoints: OTLP/gRPC TraceService/Export and LogsService/Export on "
        "--grpc-port; POST /v1/traces and POST /v1/logs (application/x-protobuf or "
        "application/json, gzip allowed), GET /health and GET "
        "/metrics (Prometheus), GET /approvals and POST /approvals/ID/approve|deny|withdraw (the "
        "guard's approval requests, behind the bearer token) on --http-port. SIGTERM or "
        "Ctrl-C stops taking requests, finishes those in progress, judges every buffered "
        "trace and flushes store and forwarder before exiting.",
    )
    listen = serve.add_argument_group("listening")
    listen.add_argument(
        "--host",
        help="address to bind (default 127.0.0.1; 0.0.0.0 for every interface) "
        "[OTEL_SAFETY_SERVE_HOST]",
    )
    listen.add_argument(
        "--grpc-port",
        type=_port,
        help="OTLP/gRPC port; 0 picks a free one, 'off' disables (default 4317) "
        "[OTEL_SAFETY_SERVE_GRPC_PORT]",
    )
    listen.add_argument(
        "--http-port",
        type=_port,
        help="OTLP/HTTP, health and metrics port; 0 picks a free one, 'off' disables "
        "(default 4318) [OTEL_SAFETY_SERVE_HTTP_PORT]",
    )
    listen.add_argument(
        "--token-file",
        help="require 'Authorization: Bearer <token>' with the token in this file "
        "[OTEL_SAFETY_SERVE_TOKEN_FILE; or the token itself in OTEL_SAFETY_SERVE_TOKEN]",
    )
    listen.add_argument(
        "--tls-cert",
        help="PEM certificate: serve TLS [OTEL_SAFETY_SERVE_TLS_CERT]",
    )
    listen.add_argument(
        "--tls-key",
        help="PEM private key [OTEL_SAFETY_SERVE_TLS_KEY]",
    )
    listen.add_argument(
        "--max-request-mib",
        type=float,
        help="largest request body in MiB, after decompression (default 20) "
        "[OTEL_SAFETY_SERVE_MAX_REQUEST_MIB]",
    )
    listen.add_argument(
        "--retry-after",
        type=float,
        help="seconds a client is asked to wait when the pipeline is saturated (default 2) "
        "[OTEL_SAFETY_SERVE_RETRY_AFTER]",
    )
    listen.add_argument(
        "--drain-seconds",
        type=float,
        metavar="SECONDS",
        help="at a stop, how long requests in progress, judging the buffered traces and "
        "writing and forwarding them may take in all; what is not written or forwarded by "
        "then stays in the spools for the next start (default 30; keep it below the "
        "orchestrator's grace period). A second Ctrl-C or SIGTERM exits at once "
        "[OTEL_SAFETY_SERVE_DRAIN_SECONDS]",
    )
    store = serve.add_argument_group("where spans go")
    add_db(store, help=f"DuckDB store file (default {DEFAULT_DB}) [OTEL_SAFETY_DB]")
    store.add_argument(
        "--no-store", action="store_true", help="write no store at all [OTEL_SAFETY_STORE=false]"
    )
    store.add_argument(
        "--store-keep-open",
        type=float,
        metavar="SECONDS",
        help="keep the store file open up to this long while writes keep coming: no "
        "checkpoint per write, but readers wait up to that long (default 0: let go after "
        "every write) [OTEL_SAFETY_STORE_KEEP_OPEN]",
    )
    store.add_argument(
        "--spool",
        metavar="DIR|off",
        help="write-ahead spool: each request is on disk here before it is acknowledged, "
        "until its traces are in the store, and what a stop or crash left is judged at the "
        "next start (default: <db>.spool beside the store; none for --lake unless given) "
        "[OTEL_SAFETY_SERVE_SPOOL]",
    )
    store.add_argument(
        "--spool-max-mib",
        type=float,
        help="the spool's size at most; when full, requests are refused with a retryable "
        "status (default 1024) [OTEL_SAFETY_SERVE_SPOOL_MAX_MIB]",
    )
    store.add_argument(
        "--lake",
        help="write to a DuckLake instead of a DuckDB file, e.g. 'postgres:dbname=lake "
        "host=db user=otel' (needs otel-safety[lake]) [OTEL_SAFETY_LAKE]",
    )
    store.add_argument(
        "--lake-data-path",
        help="where the lake keeps its Parquet files; needed when the lake is created "
        "[OTEL_SAFETY_LAKE_DATA_PATH]",
    )
    store.add_argument(
        "--forward",
        metavar="ENDPOINT",
        help="send annotated spans on to this OTLP endpoint, e.g. http://collector:4317 "
        "(off by default) [OTEL_SAFETY_FORWARD_ENDPOINT]",
    )
    store.add_argument(
        "--forward-protocol",
        choices=PROTOCOLS,
        help="protocol of the next hop (default grpc); TLS, headers and compression come from "
        "the standard OTEL_EXPORTER_OTLP_TRACES_* variables [OTEL_SAFETY_FORWARD_PROTOCOL]",
    )
    store.add_argument(
        "--forward-spool",
        metavar="DIR|off",
        help="annotated spans wait here on disk until the next hop takes them, so an outage "
        "delays them instead of losing them (default: <db>.forward beside the store; none "
        "with --no-store or --lake unless given) [OTEL_SAFETY_FORWARD_SPOOL]",
    )
    pipeline = serve.add_argument_group("pipeline")
    add_detectors(pipeline, "comma-separated detector keys (default: all) [OTEL_SAFETY_DETECTORS]")
    pipeline.add_argument(
        "--decision-wait",
        type=float,
        help="seconds a trace without an ended root may sit idle before it is judged "
        "(default 30) [OTEL_SAFETY_DECISION_WAIT]",
    )
    pipeline.add_argument(
        "--queue-size",
        type=int,
        help="spans waiting for the detectors at most (default 65536) [OTEL_SAFETY_QUEUE_SIZE]",
    )
    add_workers(
        pipeline,
        "detection processes (default: one per core; 0 judges in the server's own "
        "process) [OTEL_SAFETY_WORKERS]",
    )
    pipeline.add_argument(
        "--keep-secrets",
        action="store_true",
        help="store and forward span attributes and log records as they came; by default serve "
        "masks secrets (keys, tokens, passwords, card numbers) after judging "
        "[OTEL_SAFETY_REDACT_SECRETS=false]",
    )
    web = serve.add_argument_group("dashboard")
    web.add_argument(
        "--dashboard",
        action="store_true",
        default=None,
        help="also serve the web dashboard over the store, on --host with the same token "
        "(needs otel-safety[dashboard]) [OTEL_SAFETY_SERVE_DASHBOARD=true]",
    )
    web.add_argument(
        "--dashboard-port",
        type=int,
        help="the dashboard's port; 0 picks a free one (default 8050) [OTEL_SAFETY_DASHBOARD_PORT]",
    )
    add_listen_options(web, host=False)
    serve.add_argument(
        "--log-level",
        choices=("DEBUG", "INFO", "WARNING", "ERROR"),
        help="log level (default INFO) [OTEL_SAFETY_LOG_LEVEL]",
    )
    serve.set_defaults(handler=cmd_serve)


def _port(text: str) -> int | str:
    """A port number, or "off" (not None: None is a flag not given, left to the variable)."""
    if text.strip().lower() in PORT_OFF:
        return "off"
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(
            f"a port is a number from 0 to 65535 (0 picks a free one) or 'off', got {text!r}"
        )
    return value


def _redact_secrets(keep: bool) -> bool | None:
    """serve masks secrets unless the flag or OTEL_SAFETY_REDACT_SECRETS says otherwise."""
    if keep:
        return False
    if from_environment("redact_secrets"):
        return None  # the variable decides
    return True


def options_from_args(args: argparse.Namespace) -> tuple[Settings, SidecarOptions]:
    settings = Settings.resolve(
        db_path=args.db,
        store=False if args.no_store else None,
        store_keep_open=args.store_keep_open,
        detectors=detector_keys(args.detectors),
        decision_wait=args.decision_wait,
        queue_size=args.queue_size,
        redact_secrets=_redact_secrets(args.keep_secrets),
        workers=args.workers,
        serve_host=args.host,
        serve_grpc_port=args.grpc_port,
        serve_http_port=args.http_port,
        serve_token_file=args.token_file,
        serve_tls_cert=args.tls_cert,
        serve_tls_key=args.tls_key,
        serve_max_request_mib=args.max_request_mib,
        serve_retry_after=args.retry_after,
        serve_drain_seconds=args.drain_seconds,
        serve_spool=args.spool,
        serve_spool_max_mib=args.spool_max_mib,
        lake=args.lake,
        lake_data_path=args.lake_data_path,
        forward_endpoint=args.forward,
        forward_protocol=args.forward_protocol,
        forward_spool=args.forward_spool,
        serve_dashboard=args.dashboard,
        dashboard_port=args.dashboard_port,
        log_level=args.log_level,
    )
    token = read_token(settings)
    if settings.serve_max_request_mib <= 0:
        raise ValueError("--max-request-mib must be positive")
    if settings.serve_spool_max_mib <= 0:
        raise ValueError("--spool-max-mib must be positive")
    if settings.forward_endpoint:
        check_endpoint(settings.forward_endpoint, settings.forward_protocol)
    check_host(settings.serve_host)
    ensure_free(settings.serve_host, settings.serve_grpc_port, "gRPC", "--grpc-port")
    ensure_free(settings.serve_host, settings.serve_http_port, "HTTP", "--http-port")
    options = SidecarOptions(
        host=settings.serve_host,
        grpc_port=settings.serve_grpc_port,
        http_port=settings.serve_http_port,
        token=token,
        tls_cert=settings.serve_tls_cert,
        tls_key=settings.serve_tls_key,
        max_request_bytes=int(settings.serve_max_request_mib * MIB),
        retry_after=settings.serve_retry_after,
        drain_timeout=settings.serve_drain_seconds,
        forward_endpoint=settings.forward_endpoint,
        forward_protocol=settings.forward_protocol,
        lake=settings.lake,
        lake_data_path=settings.lake_data_path,
        spool=settings.serve_spool,
        forward_spool=settings.forward_spool,
        spool_max_bytes=int(settings.serve_spool_max_mib * MIB),
    )
    return settings, options


def cmd_serve(args: argparse.Namespace) -> int:
    settings, options = options_from_args(args)
    logging.basicConfig(
        level=settings.log_level,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    # What the dashboard needs is checked before the store is claimed: a failed start
    # leaves no lock file behind.
    web = None
    if settings.serve_dashboard:
        if not settings.store or options.lake:
            raise ValueError("--dashboard reads the DuckDB store: it needs --db, not --no-store "
                             "or --lake")  # fmt: skip
        if not 0 <= settings.dashboard_port <= 65535:
            raise ValueError(f"--dashboard-port is 0 to 65535, got {settings.dashboard_port}")
        web = dashboard_options(
            settings.db_path,
            options.token,
            options.host,
            args.refresh,
            args.reviewer,
            beside_writer=True,
        )
    claim = None
    if settings.store and not options.lake:
        claim, holder = claim_store(settings.db_path)
        if holder is not None:
            print(
                f"otel-safety serve: warning: another serve (pid {holder}) already writes "
                f"{settings.db_path}; the two will take turns on the file. Give each its own "
                "--db, or use --lake for several writers.",
                file=sys.stderr,
                flush=True,
            )
    built: list[Sidecar] = []
    # Before building: a stop while detectors load is orderly; a second one exits at once.
    stop = StopSignals(force=lambda: _forced_exit(built))
    print("otel-safety serve: starting: opening the store, loading the detectors ...", flush=True)
    try:
        sidecar = Sidecar(settings, options)
        built.append(sidecar)
        sidecar.start()
        dashboard = None
        try:
            if web is not None:
                from otel_safety.dashboard.server import DashboardServer

                tls = (options.tls_cert, options.tls_key) if options.tls_cert else None
                dashboard = DashboardServer(
                    web, host=options.host, port=settings.dashboard_port, tls=tls
                )
                dashboard.start()
            _announce(sidecar, settings, options, dashboard.url if dashboard else None)
            stop.wait()
            print("otel-safety serve: stopping: draining requests and flushing ...", flush=True)
        finally:
            if dashboard is not None:
                dashboard.stop()
            flushed = sidecar.stop()
    finally:
        if claim is not None:
            claim.release()
    print(f"otel-safety serve: stopped ({sidecar.summary()})", flush=True)
    # A stop that left acknowledged work unwritten tells its orchestrator so: the next start
    # on the store finishes it (or, without a spool, it was lost). Batches a next hop that is
    # down has not taken are no such work: they wait in the forward spool, as designed.
    unfinished = sidecar.unwritten or (not flushed and sidecar.spool is None)
    status = EXIT_UNFINISHED if unfinished else 0
    if not flushed:
        # The flush runs on past the drain: leave it, as a second stop signal does (the
        # spools keep its work), rather than let the interpreter's exit wait for it.
        sys.stderr.flush()
        os._exit(status)
    return status


def _forced_exit(built: list[Sidecar]) -> str:
    """What a second stop signal leaves behind, said before the process exits."""
    line = "otel-safety serve: second stop signal: exiting without finishing the drain; "
    spool = built[0].spool if built else None
    if spool is None:
        return line + "spans received and not yet written are lost (no spool)"
    return (
        line + f"acknowledged requests not yet written stay in the spool {spool.folder} "
        "and are judged at the next start"
    )


def _announce(
    sidecar: Sidecar, settings: Settings, options: SidecarOptions, dashboard_url: str | None
) -> None:
    """Every address first, "ready" last: whoever waits for "ready" has read them all."""
    lines = []
    if sidecar.grpc_target:
        lines.append(f"OTLP/gRPC on {sidecar.grpc_target}")
    if sidecar.http_url:
        url = sidecar.http_url
        lines.append(f"OTLP/HTTP on {url}/v1/traces (health {url}/health, metrics {url}/metrics)")
        if settings.store and not options.lake:
            lines.append(f"approvals on {url}/approvals")
    if not settings.store:
        lines.append("store: off")
    elif options.lake:
        lines.append(f"store: DuckLake {sidecar.engine.sinks[0].path}")  # type: ignore[attr-defined]
    else:
        lines.append(f"store: {Path(settings.db_path).resolve()}")
        lines.append(f"halts: {_halts_line(settings.halt_on)}")
    if sidecar.spool is not None:
        lines.append(
            f"spool: {sidecar.spool.folder} (each request on disk before it is acknowledged; "
            f"at most {settings.serve_spool_max_mib:g} MiB)"
        )
    elif settings.store:
        lines.append("spool: off (requests acknowledged and not yet written are lost at a crash)")
    if options.forward_endpoint:
        lines.append(
            f"forwarding to {options.forward_endpoint} ({options.forward_protocol}, "
            f"{_transport(options.forward_endpoint)})"
        )
    else:
        lines.append("forwarding: off")
    if metrics_endpoint := (
        os.environ.get("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")
        or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    ):
        lines.append(
            f"own metrics also exported over OTLP to {metrics_endpoint} "
            "(OTEL_EXPORTER_OTLP_[METRICS_]ENDPOINT)"
        )
    if settings.data_dir:
        lines.append(data_folder_line(settings.data_dir))
    if settings.principals:
        lines.append(f"principals file: {Path(settings.principals).resolve()}")
    if settings.policy:
        lines.append(f"escalation policy: Cedar {Path(settings.policy).resolve()}")
    if settings.calibration:
        keys = [key for key, _ in sidecar.engine.pipeline.in_force()]
        lines.append(in_use(settings.calibration, keys, settings.thresholds))
    modes = _monitor_modes(sidecar)
    if modes:
        lines.append(f"behaviour monitors: {modes}")
    if dashboard_url:
        lines.append(f"dashboard on {dashboard_url}/")
    if options.token:
        lines.append("bearer token required")
    for line in lines:
        print(f"otel-safety serve: {line}", flush=True)
    print(
        "otel-safety serve: ready; Ctrl-C or SIGTERM drains and stops (a second one exits at once)",
        flush=True,
    )


def _transport(endpoint: str) -> str:
    """What an endpoint's scheme means for the exporter: http:// plaintext, https:// and a
    bare host:port TLS (as the gRPC exporter reads it; say so, or a plaintext hop given
    without a scheme fails its handshakes with nothing on the banner to tell why)."""
    if endpoint.startswith("http://"):
        return "plaintext"
    if endpoint.startswith("https://"):
        return "TLS"
    return "TLS: no scheme given; http:// for plaintext"


def _monitor_modes(sidecar: Sidecar) -> str:
    """The behaviour monitors' modes in force (their data files and OTEL_SAFETY_MONITOR_MODES)."""
    in_force = sidecar.engine.pipeline.in_force()  # from the detection processes
    return ", ".join(f"{key} {mode}" for key, mode in in_force if mode is not None)


def _halts_line(halt_on: str) -> str:
    """What halts a conversation in the store's `halts` table, which guards follow."""
    if halt_on == "off":
        return "off (OTEL_SAFETY_HALT_ON=off): no verdict halts a conversation"
    which = "any HARD_STOP" if halt_on == "hard_stop" else "an active monitor's HARD_STOP"
    return (
        f"{which} halts its conversation in the store (OTEL_SAFETY_HALT_ON={halt_on}); "
        "guards given the store follow them"
    )
