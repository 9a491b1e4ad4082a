"""The one detector contract: `judge` returns assessments, the base alone builds findings
with one fire rule, and severities come from the ladders in `severity.toml`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from otel_safety.bootstrap import build_pipeline
from otel_safety.config import Settings
from otel_safety.detectors import registry
from otel_safety.detectors.base import Assessment, Detector
from otel_safety.detectors.severity import Ladder, current_ladders, load_ladders
from otel_safety.model import EscalationLevel, Evidence, Severity, Trajectory
from otel_safety.pipeline import Pipeline


class Scored(Detector):
    """Scores every run with the number its answer holds ("0.7"), on the answer's span."""

    key = "scored"
    default_threshold = 0.5
    severity = Severity.HIGH

    def __init__(self, threshold: float | None = None, named: Severity | None = None) -> None:
        super().__init__(threshold)
        self.named = named

    def judge(self, trajectory, analysis):
        score = float(trajectory.final_output or 0)
        evidence = [Evidence(text="the answer", span_id=trajectory.final_output_span_id)]
        return [Assessment(score, evidence, f"scored {score}", severity=self.named)]


def _run(span_factory, detector: Detector, answer: str):
    evaluation = Pipeline(detectors=[detector]).evaluate(span_factory.agent_run(answer=answer))
    [finding] = evaluation.findings
    return finding, evaluation


def test_the_base_builds_the_finding_on_the_evidence_span(span_factory):
    finding, evaluation = _run(span_factory, Scored(), "0.7")
    [answer_span] = [s for s in evaluation.spans if s.name == "chat model"]
    assert finding.detected and finding.score == 0.7 and finding.threshold == 0.5
    assert finding.span_id == f"{answer_span.context.span_id:016x}"
    assert finding.severity is Severity.HIGH  # no ladder in severity.toml: the class's own
    assert finding.explanation == "scored 0.7"
    assert evaluation.level is EscalationLevel.HUMAN_REVIEW


@pytest.mark.parametrize(
    ("answer", "threshold", "fired"),
    [("0.49", 0.5, False), ("0.5", 0.5, True), ("0", 0.0, False), ("0.01", 0.0, True)],
)
def test_one_fire_rule(span_factory, answer, threshold, fired):
    finding, evaluation = _run(span_factory, Scored(threshold), answer)
    assert finding.detected is fired
    assert finding.severity is (Severity.HIGH if fired else Severity.LOW)
    assert (evaluation.level is EscalationLevel.NONE) is not fired


def test_a_severity_its_rule_names_stands_in_for_the_ladder(span_factory):
    finding, _ = _run(span_factory, Scored(named=Severity.MEDIUM), "0.9")
    assert finding.severity is Severity.MEDIUM
    finding, _ = _run(span_factory, Scored(named=Severity.MEDIUM), "0.1")
    assert finding.severity is Severity.LOW  # not fired: low whatever the rule says


def test_a_ladder_gives_the_strictest_step_reached():
    ladder = Ladder(
        ((0.0, Severity.LOW), (0.5, Severity.MEDIUM), (0.8, Severity.HIGH), (0.4, Severity.HIGH))
    )
    assert [ladder.at(s) for s in (0.0, 0.39, 0.4, 0.9)] == [
        Severity.LOW,
        Severity.LOW,
        Severity.HIGH,  # a step added lower up the ladder only raises
        Severity.HIGH,
    ]
    assert Ladder.flat(Severity.CRITICAL).at(0.0) is Severity.CRITICAL
    assert ladder.describe() == "low, high from 0.4, medium from 0.5, high from 0.8"


def test_every_builtin_detector_has_a_ladder_and_every_ladder_a_detector():
    ladders = current_ladders()
    monitors = {key for key in registry.known() if registry.is_monitor(key)}
    assert set(ladders.detectors) == set(registry.known()) - monitors
    assert set(ladders.monitor_modes) == {"passive", "active"}


def test_the_packaged_ladders_keep_the_levels_they_had():
    ladders = current_ladders()
    at = {key: ladder.at for key, ladder in ladders.detectors.items()}
    assert at["intent_risk"](0.49) is Severity.LOW and at["intent_risk"](0.8) is Severity.HIGH
    assert at["topic_drift"](0.5) is Severity.HIGH and at["topic_drift"](0.8) is Severity.CRITICAL
    assert at["tool_guard"](0.89) is Severity.MEDIUM and at["tool_guard"](0.9) is Severity.CRITICAL
    assert ladders.monitor_modes["passive"].at(1.0) is Severity.MEDIUM
    assert ladders.monitor_modes["active"].at(0.85) is Severity.CRITICAL


def test_a_user_ladder_raises_a_severity(tmp_path, monkeypatch, span_factory):
    (tmp_path / "severity.toml").write_text(
        'version = 1\n[ladders]\nscored = [[0.0, "medium"], [0.9, "critical"]]\n'
    )
    monkeypatch.setenv("OTEL_SAFETY_DATA_DIR", str(tmp_path))
    finding, evaluation = _run(span_factory, Scored(), "0.95")
    assert finding.severity is Severity.CRITICAL
    assert evaluation.level is EscalationLevel.HARD_STOP
    finding, _ = _run(span_factory, Scored(), "0.6")
    assert finding.severity is Severity.MEDIUM


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ('[ladders]\nscored = [[0.0, "severe"]]\n', r"ladders\.scored: unknown severity 'severe'"),
        ('[ladders]\nscored = [[1.5, "low"]]\n', r"starts outside \[0, 1\]"),
        ("[ladders]\nscored = []\n", r"list of \[from_score, severity\] steps"),
        ('[ladder]\nscored = [[0.0, "low"]]\n', r"unknown section.*ladder"),
    ],
)
def test_a_bad_user_ladder_is_named_with_its_file(tmp_path, body, message):
    (tmp_path / "severity.toml").write_text("version = 1\n" + body)
    with pytest.raises(ValueError, match=message) as raised:
        load_ladders(str(tmp_path))
    assert str(raised.value).startswith("severity ladders:")
    assert str(tmp_path / "severity.toml") in str(raised.value)


def test_a_detector_with_nothing_to_judge_records_nothing(span_factory):
    class Silent(Scored):
        key = "silent"

        def judge(self, trajectory: Trajectory, analysis):
            return []

    evaluation = Pipeline(detectors=[Silent()]).evaluate(span_factory.agent_run(answer="1"))
    assert evaluation.findings == []


@pytest.mark.process
def test_the_custom_detector_example_runs_beside_ours():
    example = Path(__file__).resolve().parents[1] / "examples" / "custom_detector.py"
    done = subprocess.run(
        [sys.executable, str(example)], capture_output=True, text=True, timeout=120, check=True
    )
    lines = done.stdout.splitlines()
    assert "FIRED unlisted_tool  high     run_shell is not on the allowlist." in lines
    assert "ok    unlisted_tool  low      read_file is allowed." in lines
    assert sum(line.split()[1] == "tool_guard" for line in lines[:-1]) == 2
    assert lines[-1] == "trace level: HUMAN_REVIEW"


def test_a_broken_user_ladder_stops_a_command_and_leaves_an_app_judging(
    tmp_path, monkeypatch, caplog, span_factory
):
    (tmp_path / "severity.toml").write_text('version = 1\n[ladders]\nscored = [[0.0, "severe"]]\n')
    monkeypatch.setenv("OTEL_SAFETY_DATA_DIR", str(tmp_path))
    settings = Settings.resolve()
    with pytest.raises(ValueError, match="unknown severity 'severe'"):
        build_pipeline(settings)  # ingest, eval, detectors --check: stopped before any work
    build_pipeline(settings, lazy=True)  # an app starts
    for _ in range(2):
        finding, _ = _run(span_factory, Scored(), "0.9")
        assert finding.severity is Severity.HIGH  # the packaged ladders: none for `scored`
    told = [r for r in caplog.records if "packaged severity ladders" in r.getMessage()]
    assert len(told) == 1
