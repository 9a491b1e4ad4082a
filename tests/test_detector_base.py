"""The detector contract's shared pieces: evidence clipping and secret masking."""

from __future__ import annotations

import pytest

from otel_safety.detectors.base import EVIDENCE_MAX_CHARS, Assessment, Detector, clip, redact
from otel_safety.model import Evidence, Trajectory


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("export OPENAI_API_KEY=sk-abcdefghijklmnopqrstuv", "sk-abcdefghijklmnopqrstuv"),
        ("password: hunter22", "hunter22"),
        ('{"token": "abcd1234efgh"}', "abcd1234efgh"),
        ("aws AKIAIOSFODNN7EXAMPLE", "AKIAIOSFODNN7EXAMPLE"),
        ("ghp_" + "a" * 36, "a" * 36),
        ("Bearer eyJhbGciOiJIUzI1NiIs.eyJzdWIiOiIxMjM0NTY3.SflKxwRJSMeKKF2QT4fw", "SflKxwRJ"),
        ("-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----", "MIIEow"),
    ],
)
def test_secrets_are_masked(text, secret):
    masked = redact(text)
    assert secret not in masked and "[REDACTED]" in masked


def test_ordinary_commands_are_left_alone():
    assert redact("rm -rf build && git push origin main") == "rm -rf build && git push origin main"


def test_clip_shortens_flattens_and_masks():
    clipped = clip("line one\n\nline two " + "x" * 500 + " password=swordfish")
    assert clipped.startswith("line one line two") and len(clipped) == EVIDENCE_MAX_CHARS
    assert "swordfish" not in clip("use password=swordfish now")


def test_entries_are_checked():
    from otel_safety.detectors.entry import trajectory_from_entry

    with pytest.raises(TypeError, match="an entry is a mapping"):
        trajectory_from_entry("rm -rf /")
    with pytest.raises(ValueError, match=r"unknown entry key.*prompt.*response"):
        trajectory_from_entry({"prompt": "hi", "response": "no"})
    row = {"id": "r1", "label": True, "note": "", "input": "hi", "output": "hello"}
    assert trajectory_from_entry(row).final_output == "hello"


def test_user_data_files_are_checked(tmp_path, monkeypatch):
    from otel_safety.analysis.patterns.datafiles import DATA_DIR_ENV, load_data

    with pytest.raises(ValueError, match="is not a directory"):
        load_data("refusal", data_dir=str(tmp_path / "missing"))
    (tmp_path / "refusal.toml").write_text("[refusal]\nexplicit = ['x']\n")
    with pytest.raises(ValueError, match="version = 1"):
        load_data("refusal", data_dir=str(tmp_path))
    (tmp_path / "refusal.toml").write_text("version = 1\n[refusals]\nexplicit = ['x']\n")
    with pytest.raises(ValueError, match=r"unknown section.*refusals"):
        load_data("refusal", data_dir=str(tmp_path))
    assert DATA_DIR_ENV == "OTEL_SAFETY_DATA_DIR"


class Quoting(Detector):
    """A user's detector that quotes what it saw as it is, without `clip`."""

    key = "quoting"
    default_threshold = 0.5

    def judge(self, trajectory, analysis):
        quote = "key AKIAIOSFODNN7EXAMPLE at postgres://admin:hunter2secret@db/x"
        return [Assessment(1.0, [Evidence(text=quote)], f"found {quote}")]


def test_what_a_users_detector_quotes_is_masked_by_the_base():
    [finding] = Quoting().evaluate_all(Trajectory(trace_id="t" * 32))
    for said in (finding.explanation, finding.evidence[0].text):
        assert "AKIAIOSFODNN7EXAMPLE" not in said and "hunter2secret" not in said
        assert "[REDACTED]" in said
