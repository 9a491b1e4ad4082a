"""The benchmark scripts' own logic, without timing anything: what they refuse, what they
hand their children, what they count. Their figures are printed, never asserted."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"


@pytest.fixture
def bench(monkeypatch):
    """A loader for `bench/` modules, as the scripts import each other (bench/ on sys.path)."""
    monkeypatch.syspath_prepend(str(BENCH))
    return importlib.import_module


@pytest.mark.parametrize(
    "script",
    ["bench_detection", "bench_store", "bench_redaction", "bench_otlp_json", "bench_ingest"],
)
def test_a_data_bench_without_the_data_folder_is_a_usage_error(
    bench, script, tmp_path, monkeypatch, capsys
):
    module = bench(script)
    for data in (tmp_path, tmp_path / "missing"):
        monkeypatch.setattr(sys, "argv", [f"{script}.py", "--data", str(data)])
        with pytest.raises(SystemExit) as stopped:
            module.main()
        assert stopped.value.code == 2
        assert f"no agentdojo/ folder in {data}: pass --data" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("script", "arguments"),
    [
        ("bench_guard", ["--rounds", "0"]),
        ("bench_app_start", ["--rounds", "0"]),
        ("bench_store", ["--data", "x", "--repeats", "0"]),
        ("bench_redaction", ["--repeats", "-1"]),
        ("bench_otlp_json", ["--rounds", "0"]),
        ("bench_metrics", ["--scrapes", "0"]),
    ],
)
def test_a_count_below_one_is_a_usage_error(bench, script, arguments, monkeypatch, capsys):
    module = bench(script)
    monkeypatch.setattr(sys, "argv", [f"{script}.py", *arguments])
    with pytest.raises(SystemExit) as stopped:
        module.main()
    assert stopped.value.code == 2
    assert "must be at least 1" in capsys.readouterr().err


@pytest.mark.parametrize("script", ["bench_ingest", "bench_metrics", "bench_store"])
def test_help_shows_the_docstrings_whole_first_paragraph(bench, script, monkeypatch, capsys):
    module = bench(script)
    monkeypatch.setattr(sys, "argv", [f"{script}.py", "--help"])
    with pytest.raises(SystemExit):
        module.main()
    shown = " ".join(capsys.readouterr().out.split())
    paragraph = " ".join(module.__doc__.split("\n\n")[0].split())
    assert paragraph.endswith(".") and paragraph in shown


def test_a_failed_child_is_reported_with_both_its_outputs(bench):
    done = subprocess.CompletedProcess(["ingest"], 1, stdout="no spans in the file\n", stderr="")
    said = bench("_shared").failure("ingest --workers 0", done)
    assert said.startswith("ingest --workers 0 failed (exit 1)")
    assert "no spans in the file" in said
    done = subprocess.CompletedProcess(["ingest"], 2, stdout="on stdout", stderr="on stderr")
    said = bench("_shared").failure("ingest", done)
    assert "on stdout" in said and "on stderr" in said
