"""DuckLake storage: several `serve` processes write one lake, any DuckDB client reads it all.

The multi-writer test runs a real PostgreSQL catalog (Debian's postgresql, started and
stopped here, on 127.0.0.1); the store's own behaviour is checked on a DuckDB-file catalog.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack

import duckdb
import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from postgres_server import PostgresServer, postgres_bin
from sidecar_support import ServeProcess, require, run_agent

from otel_safety import queries
from otel_safety.exporters import ducklake
from otel_safety.extras import install_hint
from otel_safety.pipeline import Pipeline


def require_lake() -> None:
    for name in ducklake.EXTENSIONS.values():
        require(
            importlib.util.find_spec(name) is not None, f"the {name} package (otel-safety[lake])"
        )
    try:
        ducklake.extension_path("ducklake")
    except ducklake.LakeError as exc:
        require(False, str(exc))


def evaluate(spans):
    from conftest import KeywordDetector

    pipeline = Pipeline(detectors=[KeywordDetector()])
    return pipeline.evaluate(spans, "root_ended")


def test_the_store_writes_a_file_catalog_lake_and_a_rewrite_keeps_one_copy(
    tmp_path, span_factory, caplog
):
    require_lake()
    catalog, data = str(tmp_path / "meta.ducklake"), str(tmp_path / "data")
    evaluation = evaluate(span_factory.agent_run(answer="BAD answer"))
    store = ducklake.DuckLakeStore(catalog, data, write_interval=0)
    # A DuckDB catalog file is held by its writer: readers elsewhere fail, so it is said.
    assert "no other process can read or write the lake" in caplog.text
    assert not ducklake.shared_catalog(catalog)
    assert ducklake.shared_catalog("postgres:dbname=lake") and ducklake.shared_catalog(
        "ducklake:sqlite:meta.sqlite"
    )
    store.write([evaluation])
    store.write([evaluation])  # the same trace again: replaced, not duplicated
    store.shutdown()
    with ducklake.connect(catalog, read_only=True) as con:
        spans = con.execute("SELECT name FROM spans ORDER BY name").fetchall()
        findings = con.execute("SELECT detector, detected FROM findings").fetchall()
        traces = con.execute("SELECT count(*) FROM traces").fetchone()
    assert spans == [("chat model",), ("invoke_agent helper",)]
    assert findings == [("keyword", True)]
    assert traces == (1,)


def test_spans_written_again_keep_only_their_new_judgements_findings(tmp_path, span_factory):
    """As in a DuckDB store: judged again with fewer detectors, a trace kept the others'
    findings beside a level they no longer made."""
    require_lake()
    from conftest import KeywordDetector

    class Other(KeywordDetector):
        key = "other"

    catalog, data = str(tmp_path / "meta.ducklake"), str(tmp_path / "data")
    spans = span_factory.agent_run(answer="BAD answer")
    store = ducklake.DuckLakeStore(catalog, data, write_interval=0)
    store.write([Pipeline(detectors=[KeywordDetector(), Other()]).evaluate(spans)])
    store.write([Pipeline(detectors=[KeywordDetector()]).evaluate(spans)])
    store.shutdown()
    with ducklake.connect(catalog, read_only=True) as con:
        fired = con.execute("SELECT detector FROM findings WHERE detected").fetchall()
    assert fired == [("keyword",)]


def test_every_named_query_runs_unchanged_on_the_lake(tmp_path, span_factory):
    require_lake()
    catalog, data = str(tmp_path / "meta.ducklake"), str(tmp_path / "data")
    store = ducklake.DuckLakeStore(catalog, data, write_interval=0)
    store.write(
        [evaluate(span_factory.agent_run(answer="BAD")), evaluate(span_factory.agent_run())]
    )
    store.shutdown()
    names = list(queries.available())
    assert "flagged_spans" in names
    with ducklake.connect(catalog, read_only=True) as con:
        for name in names:
            columns, _rows = queries.run(con, queries.resolve_sql(name))
            assert columns, name
        _columns, flagged = queries.run(con, queries.resolve_sql("flagged_spans"))
    assert len(flagged) == 1


def test_the_query_command_reads_a_lake(tmp_path, span_factory, capsys):
    require_lake()
    from otel_safety.cli import main

    catalog, data = str(tmp_path / "meta.ducklake"), str(tmp_path / "data")
    store = ducklake.DuckLakeStore(catalog, data, write_interval=0)
    store.write([evaluate(span_factory.agent_run(answer="BAD"))])
    store.shutdown()
    assert main(["query", "flagged_spans", "--lake", catalog, "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [row["detector"] for row in rows] == ["keyword"]
    assert main(["query", "flagged_spans", "--lake", str(tmp_path / "none" / "x.ducklake")]) == 1
    assert "cannot attach the lake" in capsys.readouterr().err


def test_a_missing_extension_build_is_a_clear_error(monkeypatch):
    require_lake()
    monkeypatch.setattr(duckdb, "__version__", "0.0.1")
    with pytest.raises(ducklake.LakeError, match=r"no build for duckdb 0\.0\.1") as raised:
        ducklake.extension_path("ducklake")
    assert "==0.0.1" not in str(raised.value)  # no pin that does not exist
    assert f"installs duckdb {ducklake.lake_pins()['duckdb']}" in str(raised.value)


@pytest.mark.process
@pytest.mark.parametrize("duckdb_version", ["installed", "9.9.9"])
def test_query_lake_without_the_extension_suggests_only_pins_the_extra_has(duckdb_version):
    pins = ducklake.lake_pins()
    assert pins["duckdb"] and pins["duckdb-extension-ducklake"]
    pretend = "" if duckdb_version == "installed" else f"duckdb.__version__ = {duckdb_version!r}; "
    script = (
        "import sys, duckdb; sys.modules['duckdb_extension_ducklake'] = None; "  # not installed
        + pretend
        + "from otel_safety.cli import main; "
        "sys.exit(main(['query', 'flagged_spans', '--lake', 'lake.ducklake']))"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 1
    assert f"ducklake extension is not installed: {install_hint('lake')}" in done.stderr
    suggested = set(re.findall(r"([a-z-]+)==([0-9.]+)", done.stderr))
    assert suggested <= set(pins.items()), done.stderr
    if duckdb_version != "installed":
        assert f"installs duckdb {pins['duckdb']}" in done.stderr
        assert "9.9.9" in done.stderr  # says what this environment has


@pytest.mark.postgres
def test_two_sidecars_write_one_lake_on_postgres_and_one_client_reads_both(tmp_path):
    require_lake()
    require(postgres_bin() is not None, "PostgreSQL (Debian package postgresql)")
    data = str(tmp_path / "lake-data")
    with PostgresServer() as postgres, ExitStack() as stack:
        catalog = f"postgres:{postgres.dsn}"
        common = ["--lake", catalog, "--lake-data-path", data, "--detectors", "scope_escalation"]
        sidecars = [ServeProcess(*common), ServeProcess(*common)]
        # Both start at once: creating the tables races, and the loser must retry.
        with ThreadPoolExecutor(2) as pool:
            started = [pool.submit(stack.enter_context, sidecar) for sidecar in sidecars]
            for future in started:
                future.result()
        first, second = sidecars
        run_agent(GrpcExporter(endpoint=f"http://{first.grpc_target}", insecure=True), "agent-one")
        run_agent(HttpExporter(endpoint=f"{second.http_url}/v1/traces"), "agent-two")
        for sidecar in sidecars:
            assert sidecar.stop() == 0, sidecar.output  # SIGTERM: judge, write, exit
        with ducklake.connect(catalog, read_only=True) as con:
            services = con.execute(
                "SELECT service_name, count(*) FROM spans GROUP BY 1 ORDER BY 1"
            ).fetchall()
            fired = con.execute(
                "SELECT s.service_name, f.detector, f.escalation_level FROM findings f "
                "JOIN spans s USING (trace_id, span_id) WHERE f.detected ORDER BY 1"
            ).fetchall()
            _columns, flagged = queries.run(con, queries.resolve_sql("flagged_spans"))
    assert [name for name, _ in services] == ["agent-one", "agent-two"]
    assert services[0][1] == services[1][1] > 1
    assert fired == [
        ("agent-one", "scope_escalation", "HARD_STOP"),
        ("agent-two", "scope_escalation", "HARD_STOP"),
    ]
    assert len(flagged) == 2


def test_an_older_lake_gets_the_newer_columns(tmp_path, span_factory):
    require_lake()
    catalog, data = str(tmp_path / "old.ducklake"), str(tmp_path / "data")
    ducklake.DuckLakeStore(catalog, data, write_interval=0).shutdown()
    with ducklake.connect(catalog) as con:  # make it what schema version 2 wrote
        con.execute("ALTER TABLE findings DROP COLUMN details")
        con.execute("ALTER TABLE findings DROP COLUMN calibrated")
        con.execute("DELETE FROM otel_safety_meta")
        con.execute("INSERT INTO otel_safety_meta VALUES ('schema_version', '2')")
    evaluation = evaluate(span_factory.agent_run(answer="BAD answer"))
    evaluation.findings[0].details = {"signals": {"drift": 0.5}}
    store = ducklake.DuckLakeStore(catalog, data, write_interval=0)
    store.write([evaluation])
    store.shutdown()
    with ducklake.connect(catalog, read_only=True) as con:
        row = con.execute("SELECT details->>'$.signals.drift' FROM findings").fetchone()
    assert row == ("0.5",)
