"""The one settings model: every OTEL_SAFETY_* option, read from the variables under arguments."""

from __future__ import annotations

from pathlib import Path

import pytest

from otel_safety.analysis.patterns.datafiles import current_data_dir, use_data_files
from otel_safety.analysis.refusal.refusal import refusal_score
from otel_safety.config import ConfigError, Settings, default_db_path, env_name, from_environment


def test_serve_and_dashboard_options_are_settings_too() -> None:
    environ = {
        "OTEL_SAFETY_SERVE_GRPC_PORT": "off",
        "OTEL_SAFETY_SERVE_HTTP_PORT": "0",
        "OTEL_SAFETY_SERVE_DASHBOARD": "yes",
        "OTEL_SAFETY_DASHBOARD_PORT": "9000",
        "OTEL_SAFETY_SERVE_TOKEN": "s3cret",
    }
    settings = Settings.resolve(environ, serve_http_port=4319)
    assert settings.serve_grpc_port is None  # off
    assert settings.serve_http_port == 4319  # the flag wins
    assert (settings.serve_dashboard, settings.dashboard_port) == (True, 9000)
    assert settings.serve_token is not None
    assert settings.serve_token.get_secret_value() == "s3cret"
    assert "s3cret" not in repr(settings)
    defaults = Settings.resolve({})
    assert (defaults.serve_grpc_port, defaults.serve_http_port) == (4317, 4318)
    assert (defaults.serve_host, defaults.dashboard_host) == ("127.0.0.1", "127.0.0.1")


@pytest.mark.parametrize(
    ("environ", "variable"),
    [
        ({"OTEL_SAFETY_SERVE_GRPC_PORT": "70000"}, "OTEL_SAFETY_SERVE_GRPC_PORT"),
        ({"OTEL_SAFETY_SERVE_MAX_REQUEST_MIB": "lots"}, "OTEL_SAFETY_SERVE_MAX_REQUEST_MIB"),
        ({"OTEL_SAFETY_SERVE_DASHBOARD": "maybe"}, "OTEL_SAFETY_SERVE_DASHBOARD"),
        ({"OTEL_SAFETY_DETECTORS": " , "}, "OTEL_SAFETY_DETECTORS"),  # not "judge nothing"
        # checked with the settings, not at the app's first warned call
        ({"OTEL_SAFETY_APPROVAL_WEBHOOK": "ftp://x"}, "OTEL_SAFETY_APPROVAL_WEBHOOK"),
        ({"OTEL_SAFETY_APPROVAL_URL": "host:4318"}, "OTEL_SAFETY_APPROVAL_URL"),
    ],
)
def test_a_bad_variable_is_named(environ: dict[str, str], variable: str) -> None:
    with pytest.raises(ConfigError, match=variable):
        Settings.resolve(environ)


def test_the_variables_are_read_from_the_process_environment(monkeypatch) -> None:
    monkeypatch.setenv("OTEL_SAFETY_DECISION_WAIT", "4")
    monkeypatch.setenv("OTEL_SAFETY_DB", "from-env.duckdb")
    monkeypatch.setenv("OTEL_SAFETY_DATA_DIR", "/srv/rules")
    assert Settings().decision_wait == 4.0
    assert Settings.resolve().data_dir == "/srv/rules"
    assert Settings.resolve({}).decision_wait == 30.0  # a given environment replaces it
    assert default_db_path() == "from-env.duckdb"
    assert default_db_path({}) == "otel-safety.duckdb"


def test_one_variable_is_read_without_checking_the_others(monkeypatch) -> None:
    """The guard's key is read at import: an unrelated bad setting must not break that."""
    monkeypatch.setenv("OTEL_SAFETY_DECISION_WAIT", "soon")
    monkeypatch.setenv("OTEL_SAFETY_GUARD_KEY", " k1 ")
    assert from_environment("guard_key") == "k1"
    assert from_environment("principals") is None
    with pytest.raises(ConfigError, match="OTEL_SAFETY_DECISION_WAIT"):
        Settings.resolve()
    with pytest.raises(ConfigError, match="unknown setting"):
        from_environment("no_such_setting")


def test_a_bad_value_is_blamed_on_where_it_came_from(monkeypatch) -> None:
    monkeypatch.setenv("OTEL_SAFETY_QUEUE_SIZE", "0")
    with pytest.raises(ConfigError, match=r"decision_wait \(as given\).*-5") as caught:
        Settings.resolve(decision_wait=-5)
    assert "OTEL_SAFETY_DECISION_WAIT" not in str(caught.value)
    assert "queue_size (OTEL_SAFETY_QUEUE_SIZE)" in str(caught.value)


def test_env_names_keep_their_historic_spelling() -> None:
    assert env_name("db_path") == "OTEL_SAFETY_DB"
    assert env_name("scope_taxonomy") == "OTEL_SAFETY_SCOPE_TAXONOMY"
    assert env_name("serve_grpc_port") == "OTEL_SAFETY_SERVE_GRPC_PORT"


def test_the_settings_data_folder_is_handed_down_to_the_loaders(
    tmp_path: Path, monkeypatch
) -> None:
    """build_pipeline hands the settings' folder down; with none, the variable decides."""
    phrase = "Computer says no."
    (tmp_path / "refusal.toml").write_text(
        "version = 1\n[refusal]\nexplicit = ['''\\bcomputer says no\\b''']\n", encoding="utf-8"
    )
    monkeypatch.delenv("OTEL_SAFETY_DATA_DIR", raising=False)
    from otel_safety.bootstrap import build_pipeline

    try:
        build_pipeline(Settings.resolve({}, data_dir=str(tmp_path), detectors=[]))
        assert current_data_dir() == str(tmp_path)
        assert refusal_score(phrase).score == 1.0
        build_pipeline(Settings.resolve({}, detectors=[]))  # none given: back to the variable
        assert current_data_dir() is None
        assert refusal_score(phrase).score == 0.0
        monkeypatch.setenv("OTEL_SAFETY_DATA_DIR", str(tmp_path))
        assert refusal_score(phrase).score == 1.0  # the variable is read live
    finally:
        use_data_files(None, None)


def test_a_missing_data_folder_in_the_settings_fails_at_start(tmp_path: Path) -> None:
    from otel_safety.bootstrap import build_pipeline

    try:
        with pytest.raises(ConfigError, match=r"OTEL_SAFETY_DATA_DIR=.*not a folder"):
            build_pipeline(Settings.resolve({}, data_dir=str(tmp_path / "nowhere")))
    finally:
        use_data_files(None, None)


def test_a_bad_otlp_protocol_from_the_environment_names_its_variable(monkeypatch) -> None:
    from otel_safety.exporters.otlp_spans import otlp_span_exporter

    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", raising=False)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "carrier-pigeon")
    with pytest.raises(ValueError, match=r"'carrier-pigeon' \(OTEL_EXPORTER_OTLP_PROTOCOL\)"):
        otlp_span_exporter("http://127.0.0.1:4318")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "smoke-signals")
    with pytest.raises(ValueError, match=r"\(OTEL_EXPORTER_OTLP_TRACES_PROTOCOL\)"):
        otlp_span_exporter("http://127.0.0.1:4318")
