"""Settings the OpenTelemetry way: arguments, then `OTEL_SAFETY_*` variables, then defaults.

The one place an `OTEL_SAFETY_*` variable is read: `Settings` holds every option (the
pipeline's, the detectors' data files, the guard's, the deep tier's, `serve`'s and the
dashboard's), and the commands and `configure()` override it with their arguments.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, ValidationError, field_validator
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from otel_safety.analysis.memo import DEFAULT_CAPACITY
from otel_safety.model import EscalationLevel

ENV_PREFIX = "OTEL_SAFETY_"
# Fields whose variable is not simply the prefix and the field's name in capitals.
_ENV_NAMES = {"db_path": "DB"}
# The environment `Settings.resolve(environ)` reads instead of os.environ, for this call.
_ENVIRON: ContextVar[Mapping[str, str] | None] = ContextVar("otel_safety_environ", default=None)


_LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


class ConfigError(ValueError):
    """A setting has a value otel-safety cannot use; the message says which and why."""


class _Variables(PydanticBaseSettingsSource):
    """`OTEL_SAFETY_<FIELD>` variables, parsed as the README documents them (comma-separated
    lists, `key=value` pairs, true/false) rather than as pydantic-settings' JSON."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        raw = _environment().get(env_name(field_name), "").strip()
        return (raw or None), env_name(field_name), False

    def __call__(self) -> dict[str, Any]:
        environ = _environment()
        values: dict[str, Any] = {}
        for name in self.settings_cls.model_fields:
            raw = environ.get(env_name(name), "").strip()
            if raw:
                values[name] = _parse_env(name, raw)
        return values


def _environment() -> Mapping[str, str]:
    environ = _ENVIRON.get()
    return os.environ if environ is None else environ


# An approval's wait and an answer's reuse are bounded: a store keeps times as timestamps,
# and "forever" (inf, 1e12) overflowed them at the first warned call.
MAX_APPROVAL_SECONDS = 30 * 24 * 3600


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="forbid")

    db_path: str = Field("otel-safety.duckdb", description="DuckDB store file (OTEL_SAFETY_DB)")
    store: bool = Field(True, description="write the DuckDB store at all (OTEL_SAFETY_STORE)")
    store_keep_open: float = Field(
        0.0,
        ge=0,
        description="seconds the store file may stay open while writes keep coming "
        "(0: let go after every write)",
    )
    detectors: list[str] | None = Field(
        None,
        description="detector keys; all when unset; each with a leading '-' for all but those",
    )
    plugins: list[str] = Field(
        default_factory=list,
        description="modules that register detectors of your own, imported by every process "
        "that judges",
    )
    thresholds: dict[str, float] = Field(default_factory=dict, description="key=value overrides")
    decision_wait: float = Field(30.0, ge=0, description="seconds a trace may sit idle")
    max_traces: int = Field(10_000, ge=1, description="traces held at once")
    max_spans: int = Field(200_000, ge=1, description="spans held at once")
    queue_size: int = Field(65_536, ge=1, description="spans waiting for the worker")
    analysis_cache: int = Field(
        DEFAULT_CAPACITY,
        ge=0,
        description="characters of analysed text kept across traces, per generation of two "
        "(0: each trace's own only)",
    )
    pattern_cache: str | None = Field(
        None,
        description="folder keeping compiled patterns between processes ('off': none); "
        "by default the user's cache folder",
    )
    max_buffer_bytes: int = Field(
        512 << 20, ge=1, description="bytes of span text held while traces wait to be judged"
    )
    requester_attribute: str | None = Field(None, description="attribute naming the requester")
    conversation_attribute: str | None = Field(
        None, description="attribute naming the conversation, after gen_ai.conversation.id"
    )
    calibration: str | None = Field(
        None, description="calibration file from `otel-safety calibrate` (OTEL_SAFETY_CALIBRATION)"
    )
    principals: str | None = Field(
        None, description="principals file for the tool-call guard (OTEL_SAFETY_PRINCIPALS)"
    )
    policy: str | None = Field(
        None, description="Cedar escalation policy file, .cedar (OTEL_SAFETY_POLICY)"
    )
    monitor_modes: dict[str, str] = Field(
        default_factory=dict,
        description="behaviour monitor modes, key=passive|active|learning "
        "(OTEL_SAFETY_MONITOR_MODES); the monitors' data files set the defaults",
    )
    redact_secrets: bool = Field(
        False,
        description="mask secrets in stored and forwarded span attributes and trajectories "
        "(OTEL_SAFETY_REDACT_SECRETS; on by default in serve)",
    )
    workers: int | None = Field(
        None,
        ge=0,
        description="detection processes; 0 judges on the engine's thread. When unset: one "
        "per core in serve and ingest, one in an application (OTEL_SAFETY_WORKERS)",
    )
    evaluation_events: Literal["both", "logs", "spans"] = Field(
        "both",
        description="where findings go as gen_ai.evaluation.result events: log records "
        "through the Logs API, span events on the judged spans (for backends that read only "
        "spans), or both (OTEL_SAFETY_EVALUATION_EVENTS)",
    )
    log_wait: float = Field(
        2.0,
        ge=0,
        description="serve: seconds a trace whose root span ended still waits for log records "
        "naming its spans, once log records arrive at all (OTEL_SAFETY_LOG_WAIT)",
    )
    halt_on: Literal["active", "hard_stop", "off"] = Field(
        "active",
        description="which judged traces halt their conversation for the guard and the "
        "pydantic-ai capability: a HARD_STOP by a behaviour monitor in active mode, any "
        "HARD_STOP finding (tool_guard, scope_escalation, a policy), or none "
        "(OTEL_SAFETY_HALT_ON)",
    )
    approval_timeout: float = Field(
        300.0,
        gt=0,
        le=MAX_APPROVAL_SECONDS,
        description="seconds a person has to answer the guard's approval request before it "
        "expires and the call is blocked (OTEL_SAFETY_APPROVAL_TIMEOUT)",
    )
    approval_ttl: float = Field(
        900.0,
        ge=0,
        le=MAX_APPROVAL_SECONDS,
        description="seconds an approval answer holds for the same requester and a similar "
        "call (same tool, category and arguments) (OTEL_SAFETY_APPROVAL_TTL)",
    )
    approval_webhook: str | None = Field(
        None,
        description="http(s) URL told about each approval request, as JSON "
        "(OTEL_SAFETY_APPROVAL_WEBHOOK)",
    )
    approval_url: str | None = Field(
        None,
        description="address of `serve` (like http://host:4318), for the approve and deny "
        "links in the webhook's message (OTEL_SAFETY_APPROVAL_URL)",
    )
    detection: Literal["process", "thread"] = Field(
        "process",
        description="in an application, judge in a worker process (its own GIL) or on the "
        "engine's thread (OTEL_SAFETY_DETECTION)",
    )
    detection_nice: int = Field(
        10,
        ge=0,
        le=19,
        description="how much lower than the process that starts them detection processes "
        "run, as nice(1) counts: on a busy machine the application's threads get the cores "
        "first and judging waits; 0 runs them alike (OTEL_SAFETY_DETECTION_NICE)",
    )

    # The model-backed deep analysis tier (otel_safety.deep): off unless asked for.
    deep: bool = Field(
        False,
        description="send the traces that need it to a model for a deep analysis "
        "(OTEL_SAFETY_DEEP); nothing leaves the process unless this is on and an endpoint is set",
    )
    deep_model: str | None = Field(
        None, description="model name the deep analysis asks for (OTEL_SAFETY_DEEP_MODEL)"
    )
    deep_base_url: str | None = Field(
        None,
        description="OpenAI-compatible endpoint, like http://127.0.0.1:8000/v1 "
        "(OTEL_SAFETY_DEEP_BASE_URL, else OPENAI_BASE_URL); the key is read from "
        "OTEL_SAFETY_DEEP_API_KEY, else OPENAI_API_KEY",
    )
    deep_levels: list[str] = Field(
        default_factory=lambda: ["HUMAN_REVIEW", "HARD_STOP"],
        description="first-verdict levels whose traces are analysed (OTEL_SAFETY_DEEP_LEVELS)",
    )
    deep_detectors: list[str] = Field(
        default_factory=list,
        description="detectors whose firing sends a trace to deep analysis, whatever its level "
        "(OTEL_SAFETY_DEEP_DETECTORS)",
    )
    deep_uncertainty: float = Field(
        0.1,
        ge=0,
        le=1,
        description="a finding scored within this distance of its threshold is uncertain and "
        "sends its trace to deep analysis; 0 turns this off (OTEL_SAFETY_DEEP_UNCERTAINTY)",
    )
    deep_sample_rate: float = Field(
        1.0, ge=0, le=1, description="share of the candidate traces analysed"
    )
    deep_per_minute: int = Field(
        60, ge=0, description="candidate traces queued per minute at most; 0: no limit"
    )
    deep_tokens_per_minute: int = Field(
        200_000, ge=0, description="model tokens spent per minute at most; 0: no limit"
    )
    deep_queue_size: int = Field(1_000, ge=1, description="traces waiting for deep analysis")
    deep_concurrency: int = Field(2, ge=1, le=64, description="model calls at once")
    deep_timeout: float = Field(30.0, gt=0, description="seconds one model call may take")
    deep_retries: int = Field(
        2, ge=0, le=10, description="retries of a failed call (connection, 429, 5xx), backing off"
    )
    deep_max_tokens: int = Field(1_200, ge=64, description="most tokens the model may answer")
    deep_field_chars: int = Field(
        2_000, ge=100, description="characters kept of each field shown to the model"
    )
    deep_fail_closed: bool = Field(
        False,
        description="Guard.check_tool_call(deep=True): block when the deep analysis cannot "
        "answer in time (else the rules' verdict stands) (OTEL_SAFETY_DEEP_FAIL_CLOSED)",
    )

    deep_api_key: SecretStr | None = Field(
        None,
        description="key for the deep analysis endpoint (OTEL_SAFETY_DEEP_API_KEY, else "
        "OPENAI_API_KEY); never printed",
    )

    # Detector data: packaged TOML files, extended by a deployment's own.
    data_dir: str | None = Field(
        None,
        description="folder whose <name>.toml files extend the detectors' packaged data "
        "(OTEL_SAFETY_DATA_DIR)",
    )
    scope_taxonomy: str | None = Field(
        None,
        description="one more TOML file extending the scope taxonomy (OTEL_SAFETY_SCOPE_TAXONOMY)",
    )
    guard_key: SecretStr | None = Field(
        None,
        description="key signing the guard's verdicts on spans; share it with a `serve` that "
        "should trust an app's inline checks (OTEL_SAFETY_GUARD_KEY); never printed",
    )

    # `otel-safety serve` (its flags override these).
    serve_host: str = Field("127.0.0.1", description="serve: address to bind")
    serve_grpc_port: int | None = Field(4317, description="serve: OTLP/gRPC port; None: off")
    serve_http_port: int | None = Field(4318, description="serve: OTLP/HTTP port; None: off")
    serve_token: SecretStr | None = Field(
        None, description="serve and dashboard: the bearer token itself; never printed"
    )
    serve_token_file: str | None = Field(
        None, description="serve and dashboard: file holding the bearer token"
    )
    serve_tls_cert: str | None = Field(None, description="serve: PEM certificate")
    serve_tls_key: str | None = Field(None, description="serve: PEM private key")
    serve_max_request_mib: float = Field(
        20.0, description="serve: largest request body in MiB, after decompression"
    )
    serve_retry_after: float = Field(
        2.0, ge=0, description="serve: seconds a client is asked to wait when saturated"
    )
    serve_drain_seconds: float = Field(
        30.0, ge=0, description="serve: seconds a stop may take in all (requests, flush)"
    )
    serve_spool: str | None = Field(None, description="serve: write-ahead spool folder, or off")
    serve_spool_max_mib: float = Field(1024.0, description="serve: the spool's size at most")
    lake: str | None = Field(None, description="serve: DuckLake to write instead of a file")
    lake_data_path: str | None = Field(None, description="serve: the DuckLake's Parquet files")
    forward_endpoint: str | None = Field(
        None, description="serve: OTLP endpoint annotated spans go on to"
    )
    forward_protocol: str = Field("grpc", description="serve: protocol of the next hop")
    forward_spool: str | None = Field(
        None, description="serve: folder where spans wait for the next hop, or off"
    )
    serve_dashboard: bool = Field(False, description="serve: also serve the dashboard")
    log_level: str = Field("INFO", description="serve: log level")

    # `otel-safety dashboard` (and `serve --dashboard`'s port).
    dashboard_host: str = Field("127.0.0.1", description="dashboard: address to bind")
    dashboard_port: int = Field(8050, description="dashboard: port; 0 picks a free one")

    @field_validator("serve_grpc_port", "serve_http_port", mode="before")
    @classmethod
    def _port_or_off(cls, value: Any) -> Any:
        """A port from 0 (a free one) to 65535, or off."""
        if isinstance(value, str) and value.strip().lower() in PORT_OFF:
            return None
        try:
            number = int(value)
        except (TypeError, ValueError):
            number = -1
        if not 0 <= number <= 65535:
            raise ValueError("a port is a number from 0 to 65535 (0 picks a free one) or 'off'")
        return number

    @field_validator("db_path")
    @classmethod
    def _a_file(cls, path: str) -> str:
        if not path.strip():  # accepted, it made every write fail ("no table spans")
            raise ValueError("the store needs a file path, e.g. otel-safety.duckdb")
        return path

    @field_validator("approval_webhook", "approval_url")
    @classmethod
    def _http_url(cls, url: str | None) -> str | None:
        """Checked with the other settings, not at the first warned call of the app."""
        if url is not None and urlsplit(url.strip()).scheme not in ("http", "https"):
            raise ValueError("an http(s) URL, like https://hooks.example.com/x")
        return url

    @field_validator("log_level")
    @classmethod
    def _known_log_level(cls, level: str) -> str:
        named = level.strip().upper()
        if named not in _LOG_LEVELS:
            raise ValueError(f"a log level is one of {', '.join(_LOG_LEVELS)}")
        return named

    @field_validator("deep_levels")
    @classmethod
    def _known_levels(cls, levels: list[str]) -> list[str]:
        return [EscalationLevel.parse(level).name for level in levels]

    @field_validator("thresholds")
    @classmethod
    def _thresholds_in_range(cls, thresholds: dict[str, float]) -> dict[str, float]:
        """Scores run from 0 to 1, so a threshold outside that never (or always) fires."""
        outside = {key: value for key, value in thresholds.items() if not 0.0 <= value <= 1.0}
        if outside:
            named = ", ".join(f"{key}={value:g}" for key, value in outside.items())
            raise ValueError(
                f"a threshold is a score from 0 to 1 (like injection=0.5); {named} is not"
            )
        return thresholds

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Arguments, then the variables; no .env or secrets files are read behind one's back."""
        return init_settings, _Variables(settings_cls)

    @classmethod
    def resolve(cls, environ: Mapping[str, str] | None = None, **arguments: Any) -> Settings:
        """Merge arguments over environment (`os.environ` unless given) over defaults, with
        errors that name the variable. An argument of None counts as not given."""
        unknown = set(arguments) - set(cls.model_fields)
        if unknown:
            raise ConfigError(f"unknown setting(s): {', '.join(sorted(unknown))}")
        given = {name: value for name, value in arguments.items() if value is not None}
        with _reading(environ):
            try:
                return cls(**given)
            except ValidationError as exc:
                problems = "; ".join(
                    f"{'.'.join(map(str, err['loc']))} ({_source(str(err['loc'][0]), given)}): "
                    f"{err['msg']}, got {err['input']!r}"
                    for err in exc.errors()
                )
                raise ConfigError(f"invalid otel-safety setting: {problems}") from None


def _source(field: str, given: Mapping[str, Any]) -> str:
    """Where a bad value came from: an argument (a command's option) or its variable."""
    return "as given" if field in given else env_name(field)


PORT_OFF = ("off", "none", "disabled")


@contextmanager
def _reading(environ: Mapping[str, str] | None) -> Iterator[None]:
    token = _ENVIRON.set(environ)
    try:
        yield
    finally:
        _ENVIRON.reset(token)


def env_name(field: str) -> str:
    """The variable that sets `Settings.<field>`, for help texts and error messages."""
    return ENV_PREFIX + _ENV_NAMES.get(field, field.upper())


def from_environment(field: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The raw text of one setting's variable, None when unset or blank, without resolving
    (and so without checking) the others.

    For what is read on a hot path or at import, where a whole `Settings` would cost too
    much or fail for an unrelated variable: the detectors' data folder when no settings were
    handed down, the guard's signing key.
    """
    if field not in Settings.model_fields:
        raise ConfigError(f"unknown setting: {field}")
    environ = _environment() if environ is None else environ
    return environ.get(env_name(field), "").strip() or None


def read_named_file(path: str, named_by: str) -> bytes:
    """The bytes of a file a setting names, or a ConfigError saying which setting named the
    file that cannot be read (a bare "[Errno 2]" leaves the user to guess)."""
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"{named_by} {path}: cannot read it: {exc.strerror or exc}") from exc


def default_db_path(environ: Mapping[str, str] | None = None) -> str:
    """The store file a command reads when `--db` is not given: `OTEL_SAFETY_DB`, as for
    `configure()` and `serve`, else the default."""
    return from_environment("db_path", environ) or Settings.model_fields["db_path"].default


def _parse_env(name: str, raw: str) -> Any:
    if name in ("detectors", "plugins", "deep_levels", "deep_detectors"):
        keys = [key.strip() for key in raw.split(",") if key.strip()]
        if name == "detectors" and not keys:  # commas alone: a slip, not "judge nothing"
            raise ConfigError(
                f"{env_name(name)}: no detector key in {raw!r}; name keys like "
                "'injection,tool_guard' (`otel-safety detectors` lists them), or unset it for all"
            )
        return keys
    if name in ("thresholds", "monitor_modes"):
        example = "scope_escalation=0.2" if name == "thresholds" else "sandbagging=active"
        pairs = {}
        for item in filter(None, (part.strip() for part in raw.split(","))):
            key, sep, value = item.partition("=")
            if not sep:
                raise ConfigError(
                    f"{env_name(name)}: expected key=value pairs like {example!r}, got {item!r}"
                )
            pairs[key.strip()] = value.strip()
        return pairs
    if name in ("store", "redact_secrets", "deep", "deep_fail_closed", "serve_dashboard"):
        lowered = raw.lower()
        if lowered not in {"true", "false", "1", "0", "yes", "no"}:
            raise ConfigError(f"{env_name(name)}: expected true or false, got {raw!r}")
        return lowered in {"true", "1", "yes"}
    return raw
