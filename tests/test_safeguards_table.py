"""The safeguards table as data: its rows, a user's rows after ours, its errors, its docs."""

from __future__ import annotations

from pathlib import Path

import pytest

from otel_safety.bootstrap import build_pipeline
from otel_safety.config import Settings
from otel_safety.model import EscalationLevel, Finding, Severity
from otel_safety.policies import SafeguardsPolicy
from otel_safety.policies.safeguards_table import current_table, load_table
from otel_safety.policies.signals import Signals

DOCS = Path(__file__).resolve().parents[1] / "docs" / "policies.md"


def _drifting(drift: float) -> Finding:
    return Finding(
        detector="custom",
        trace_id="t",
        score=drift,
        threshold=0.5,
        detected=False,
        severity=Severity.LOW,
        details={"signals": {"drift": drift}},
    )


def test_the_docs_show_the_packaged_table():
    lines = DOCS.read_text().splitlines()
    start = lines.index("| condition | level |") + 2
    shown = [tuple(cell.strip() for cell in line.strip("|").split("|")) for line in lines[start:]]
    shown = shown[: next(i for i, row in enumerate(shown) if len(row) != 2)]
    assert shown == load_table().describe()


def test_a_user_row_decides_what_no_packaged_row_matched(tmp_path, monkeypatch):
    (tmp_path / "safeguards.toml").write_text(
        'version = 1\n[[rows]]\nlevel = "CLARIFY"\nall = { drift = 0.1 }\n'
        '[[rows]]\nlevel = "HARD_STOP"\nall = { drift = 0.3 }\n'
    )
    monkeypatch.setenv("OTEL_SAFETY_DATA_DIR", str(tmp_path))
    policy = SafeguardsPolicy()
    assert policy.decide([_drifting(0.15)], None) is EscalationLevel.CLARIFY
    assert policy.decide([_drifting(0.35)], None) is EscalationLevel.WARN  # ours came first
    assert len(current_table().rows) == len(load_table().rows) + 2


def test_scaling_caps_each_cut_off_at_one():
    table = load_table().scaled(2.0)
    assert table.level(Signals(drift=0.59)) is EscalationLevel.NONE  # WARN's 0.3 -> 0.6
    assert table.level(Signals(drift=0.99)) is EscalationLevel.WARN  # SOFT_STOP's 0.5 -> 1
    assert table.level(Signals(drift=1.0)) is EscalationLevel.HARD_STOP  # 0.8 -> 1, reached
    assert table.level(Signals(violation=True)) is EscalationLevel.HARD_STOP


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ('level = "LOUD"\nall = { drift = 0.5 }', "unknown escalation level 'LOUD'"),
        ('level = "WARN"\nall = { mood = 0.5 }', r"row 7\.all: unknown signal 'mood'"),
        ('level = "WARN"\nany = { drift = 0 }', r"row 7\.any\.drift: a cut-off is a number"),
        ('level = "WARN"', "row 7: give it a condition"),
        ("all = { drift = 0.5 }", r"row 7: say which level"),
        ('level = "WARN"\nwhen = "always"', r"row 7: unknown key\(s\) when"),
    ],
)
def test_a_bad_user_row_is_named_with_its_file(tmp_path, row, message):
    (tmp_path / "safeguards.toml").write_text(f"version = 1\n[[rows]]\n{row}\n")
    with pytest.raises(ValueError, match=message) as raised:
        load_table(str(tmp_path))
    assert str(raised.value).startswith("safeguards table:")
    assert str(tmp_path / "safeguards.toml") in str(raised.value)


def test_a_broken_user_table_stops_a_command_and_leaves_an_app_judging(
    tmp_path, monkeypatch, caplog
):
    (tmp_path / "safeguards.toml").write_text(
        'version = 1\n[[rows]]\nlevel = "WARN"\nall = { mood = 0.5 }\n'
    )
    monkeypatch.setenv("OTEL_SAFETY_DATA_DIR", str(tmp_path))
    settings = Settings.resolve()
    with pytest.raises(ValueError, match="unknown signal 'mood'"):
        build_pipeline(settings)  # ingest, eval, detectors --check: stopped before any work
    pipeline = build_pipeline(settings, lazy=True)  # an app: the packaged table, logged once
    assert pipeline.policy.decide([_drifting(0.85)], None) is EscalationLevel.HARD_STOP
    assert pipeline.policy.decide([_drifting(0.35)], None) is EscalationLevel.WARN
    told = [r for r in caplog.records if "safeguards table" in r.getMessage()]
    assert len(told) == 1 and "packaged table is used" in told[0].getMessage()
