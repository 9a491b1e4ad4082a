"""The benchmark scripts' own logic, without timing anything: what they refuse, what they
hand their children, what they count. Their figures are printed, never asserted."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from otel_safety.evaluation.guard_bench import case_files, packaged_set, read_cases

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


_CALLER = {
    "PATH": "/usr/bin",
    "OTEL_SAFETY_SERVE_HOST": "0.0.0.0",
    "OTEL_SAFETY_DETECTORS": "injection",
    "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9",
    "OTEL_SERVICE_NAME": "caller",
    "OTEL_SAFETY_PATTERN_CACHE": "/tmp/patterns",
}


class _Started(Exception):
    pass


def test_a_benchs_child_gets_no_otel_setting_of_the_caller_but_the_pattern_cache(bench):
    shared = bench("_shared")
    assert shared.child_environment(environ=_CALLER) == {
        "PATH": "/usr/bin",
        "OTEL_SAFETY_PATTERN_CACHE": "/tmp/patterns",
    }
    chosen = shared.child_environment({"OTEL_SAFETY_PATTERN_CACHE": "/own"}, environ=_CALLER)
    assert chosen["OTEL_SAFETY_PATTERN_CACHE"] == "/own"


def test_the_serve_benches_start_serve_on_loopback_without_the_callers_settings(bench, monkeypatch):
    for name, value in _CALLER.items():
        monkeypatch.setenv(name, value)
    module = bench("bench_serve")
    started = {}

    def popen(command, **options):
        started.update(command=command, **options)
        raise _Started

    monkeypatch.setattr(module.subprocess, "Popen", popen)
    with pytest.raises(_Started):
        module.Server("bench.duckdb", 1024, extra_args=["--spool", "off"])
    command = started["command"]
    assert command[command.index("--host") + 1] == "127.0.0.1"
    assert command[-2:] == ["--spool", "off"]
    assert not {k for k in started["env"] if k.startswith("OTEL_")} - {"OTEL_SAFETY_PATTERN_CACHE"}


@pytest.mark.parametrize("script", ["bench_serve", "bench_crash", "bench_overload"])
def test_the_serve_benches_own_clients_send_without_the_callers_exporter_settings(
    bench, script, monkeypatch
):
    """Their OTLP clients read OTEL_EXPORTER_OTLP_* when not given them: a caller's gzip
    and headers changed what the figure timed."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-caller=1")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip")
    monkeypatch.setenv("OTEL_SAFETY_PATTERN_CACHE", "/tmp/patterns")
    module = bench(script)
    monkeypatch.setattr(sys, "argv", [script])
    monkeypatch.setattr(module.argparse.ArgumentParser, "parse_args", _stop_after_arguments)
    monkeypatch.setattr(module, "Server", _stop_after_arguments)  # no serve is started
    with pytest.raises(_Started):
        module.main()
    assert not {k for k in os.environ if k.startswith("OTEL_")} - {"OTEL_SAFETY_PATTERN_CACHE"}
    assert os.environ["OTEL_SAFETY_PATTERN_CACHE"] == "/tmp/patterns"


def _stop_after_arguments(*args, **kwargs):
    """Parse nothing and stop main() at its first use of the arguments (or of a server)."""

    class Stop:
        def __getattr__(self, name):
            raise _Started

    return Stop()


def test_the_app_start_bench_sets_up_without_the_callers_exporter_settings(
    bench, monkeypatch, tmp_path
):
    for name, value in _CALLER.items():
        monkeypatch.setenv(name, value)
    module = bench("bench_app_start")
    started = {}

    def run(command, **options):
        started.update(command=command, **options)
        raise _Started

    monkeypatch.setattr(module.subprocess, "run", run)
    with pytest.raises(_Started):
        module.measure("process", tmp_path, 0, tmp_path / "patterns")
    assert "OTEL_EXPORTER_OTLP_ENDPOINT" not in started["env"]
    assert started["env"]["OTEL_SAFETY_PATTERN_CACHE"] == str(tmp_path / "patterns")
    assert "OTEL_SAFETY_DETECTORS" not in started["env"]
    assert started["env"]["PATH"] == "/usr/bin"


def _recipe(makefile: str, target: str) -> str:
    body = makefile.split(f"\n{target}:", 1)[1].split("\n\n", 1)[0]
    return body


def test_make_bench_and_bench_serve_run_every_benchmark_in_bench():
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    ran = _recipe(makefile, "bench") + _recipe(makefile, "bench-serve")
    scripts = sorted(path.name for path in BENCH.glob("bench_*.py"))
    assert scripts and [name for name in scripts if f"bench/{name}" not in ran] == []
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert [name for name in scripts if f"`{name}`" not in readme] == []


def test_a_store_grown_to_n_copies_holds_n_copies_one_under_the_corpus_ids(bench, tmp_path):
    from otel_safety import Pipeline

    module = bench("bench_store")
    spans = bench("bench_pipeline").make_traces(2)
    by_trace: dict[int, list] = {}
    for span in spans:
        by_trace.setdefault(span.context.trace_id, []).append(span)
    evaluations = [Pipeline([]).evaluate(trace) for trace in by_trace.values()]
    corpus = {f"{trace_id:032x}" for trace_id in by_trace}
    for copies in (1, 3):
        path = tmp_path / f"grown-{copies}.duckdb"
        assert module.grow(evaluations, path, copies) == copies * len(spans)
        with module.duckdb.connect(str(path), read_only=True) as con:
            held = {
                row[0] for row in con.execute("SELECT DISTINCT trace_id FROM traces").fetchall()
            }
        assert len(held) == copies * len(corpus) and corpus <= held
    with pytest.raises(ValueError):
        module.grow(evaluations, tmp_path / "none.duckdb", 0)


def test_the_crash_bench_sends_each_pass_of_its_traces_under_fresh_ids(bench):
    import random

    module = bench("bench_crash")
    spans = bench("bench_pipeline").make_traces(3)
    draw = random.Random(7)
    first, second = module.renamed(spans, draw), module.renamed(spans, draw)
    assert len(first) == len(spans) and not module._ids(first) & module._ids(second)
    assert not module._ids(first) & module._ids(spans)
    for sent in (first, second):
        ids = {(s.context.trace_id, s.context.span_id) for s in sent}
        assert len(ids) == len(spans)
        for old, new in zip(spans, sent, strict=True):
            assert (new.name, new.context.span_id, new.attributes) == (
                old.name,
                old.context.span_id,
                old.attributes,
            )
            if old.parent is not None:  # the parent is in the same (renamed) trace
                assert (new.parent.trace_id, new.parent.span_id) in ids
    old_traces = {s.context.trace_id for s in spans}
    assert len({s.context.trace_id for s in first}) == len(old_traces)


def test_the_pattern_sweep_says_how_many_patterns_it_timed_at_4n_and_how_many_not(
    bench, monkeypatch
):
    import regex

    module = bench("bench_worst_case")
    slow, quick = regex.compile("slow"), regex.compile("quick")
    monkeypatch.setattr(
        module, "collected_patterns", lambda: {("slow", 0): slow, ("quick", 0): quick}
    )

    def timed(function, limit):  # no clock: the quick pattern is "under 2 ms" everywhere
        return 0.01 if slow in (function.__defaults__ or ()) else 0.0001

    monkeypatch.setattr(module, "timed", timed)
    sweep = module.pattern_sweep(100, 1.0)
    assert sweep["superlinear"] == []  # 0.01 s at n and at 4n: no growth
    assert (sweep["patterns"], sweep["timed_at_4n"], sweep["not_timed_at_4n"]) == (2, 1, 1)


def test_the_worst_case_anchor_reads_every_input_whole(bench):
    module = bench("bench_worst_case")
    for character, shape in module._PIPELINE_INPUTS:
        text = shape.format(run=character * 100)
        assert module._ANCHOR.search(text) is None and module._ANCHOR.findall(text) == []


def test_the_redaction_anchor_finds_every_match_in_every_string(bench, monkeypatch):
    module = bench("bench_redaction")
    read, pattern = [], module._ANCHOR

    class Anchor:  # only findall: a search stops at its first match
        def findall(self, text):
            read.append(text)
            return pattern.findall(text)

    monkeypatch.setattr(module, "_ANCHOR", Anchor())
    texts = ["password first, then 10,000 more characters", "no secret here"]
    module._timed([], texts, 2)
    assert read == texts * 2


def test_the_monitors_bench_warms_up_with_its_longest_conversation_before_timing(
    bench, monkeypatch, capsys
):
    module = bench("bench_monitors")
    evaluated = []

    def seconds(pipeline, traces):  # no clock: which conversations went through, in order
        evaluated.append((bool(pipeline.detectors), len(traces)))
        return 0.0, 0.0

    monkeypatch.setattr(module, "seconds", seconds)
    module.table(module.GROUPS["behavior"], [1, 3], repeat=1)
    assert evaluated[:2] == [(False, 3), (True, 3)]  # before any row: 3 turns, both ways


@pytest.mark.process
def test_counting_instructions_says_what_it_needs_before_running_anything(tmp_path):
    """tools/count_instructions.py (valgrind's counts, for comparing checkouts on a machine
    too noisy to time them) refuses a bad count or data folder as a usage error."""
    tool = ROOT / "tools" / "count_instructions.py"
    for arguments, says in (
        (["--traces", "0"], "--traces must be at least 1"),
        (["--data", str(tmp_path)], f"no agentdojo/ folder in {tmp_path}"),
    ):
        done = subprocess.run(
            [sys.executable, str(tool), *arguments], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 2 and says in done.stderr, done.stderr


@pytest.mark.process
def test_the_guard_count_runs_the_packaged_calls_in_a_child_of_its_own(monkeypatch):
    """`count_instructions.py --guard` counts a child that checks every packaged labelled
    call; the child is run here without valgrind, so a change that breaks it shows in CI."""
    monkeypatch.syspath_prepend(str(ROOT / "tools"))
    module = importlib.import_module("count_instructions")
    done = subprocess.run(
        [sys.executable, "-c", module.GUARD_CHILD, str(ROOT), "yes"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    calls = sum(1 for path in case_files(packaged_set()) for _ in read_cases(path))
    assert done.stdout.split() == ["spans", str(calls)]
