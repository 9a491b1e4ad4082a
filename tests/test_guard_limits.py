"""The guard's limits (`repeat_limit`, `rate_limit`, `rate_window`,
`block_high_risk_unverified`) are one setting for the inline `Guard` and the trace-side
`tool_guard` detector: the `[limits]` table of `guard.toml`, or constructor arguments."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest
from test_guard_trace import _case, _store

from otel_safety import detectors as detector_registry
from otel_safety.detectors.tool_guard import ToolGuardDetector
from otel_safety.guard import Directory, Guard
from otel_safety.model import Principal, ToolCall, Trajectory

SEND = {"to": "a@b.example", "body": "ping"}


def _data_dir(tmp_path: Path, limits: str) -> Path:
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "guard.toml").write_text(f"version = 1\n\n[limits]\n{limits}\n", encoding="utf-8")
    return folder


def test_the_packaged_limits_are_the_documented_defaults() -> None:
    for limits in (Guard(Directory()).limits, ToolGuardDetector().guard.limits):
        assert limits.model_dump() == {
            "repeat_limit": 5,
            "rate_limit": 10,
            "rate_window": 10.0,
            "block_high_risk_unverified": True,
        }


def test_a_data_file_sets_the_limits_of_both_guards(tmp_path: Path, monkeypatch) -> None:
    folder = _data_dir(
        tmp_path, "repeat_limit = 2\nrate_limit = 3\nblock_high_risk_unverified = false"
    )
    monkeypatch.setenv("OTEL_SAFETY_DATA_DIR", str(folder))
    inline, traced = Guard(Directory()), ToolGuardDetector().guard
    for guard in (inline, traced):
        assert (guard.repeat_limit, guard.rate_limit, guard.block_high_risk_unverified) == (
            2,
            3,
            False,
        )
        assert guard.history.rate_window == 10.0  # not in the file: packaged
    assert Guard(Directory(), repeat_limit=7).repeat_limit == 7  # arguments win


def test_the_trace_side_repeat_limit_comes_from_the_data_file(tmp_path: Path, monkeypatch) -> None:
    steps = [("send_email", SEND, "sent"), ("send_email", SEND, "sent")]
    default = _store(tmp_path / "default", [_case("twice", "Ping Ann twice.", steps)])
    monkeypatch.setenv("OTEL_SAFETY_DATA_DIR", str(_data_dir(tmp_path, "repeat_limit = 2")))
    limited = _store(tmp_path / "limited", [_case("twice", "Ping Ann twice.", steps)])

    def rules(db: Path) -> list[list[str]]:
        with duckdb.connect(str(db), read_only=True) as con:
            rows = con.execute("SELECT rule_ids FROM audit ORDER BY decided_at").fetchall()
        return [json.loads(r[0]) if isinstance(r[0], str) else list(r[0]) for r in rows]

    assert not any("loop.repeat" in ids for ids in rules(default))
    assert [("loop.repeat" in ids) for ids in rules(limited)] == [False, True]


def _calls(count: int, name: str = "send_email", same: bool = False) -> list[ToolCall]:
    return [
        ToolCall(
            id=f"c{i}",
            name=name,
            arguments=SEND if same else {"to": f"u{i}@b.example", "body": "x"},
            span_id=f"{i + 1:016x}",
            start_ns=1_700_000_000_000_000_000 + i * 100_000_000,  # 0.1 s apart
        )
        for i in range(count)
    ]


def _rule_ids(detector: ToolGuardDetector, trajectory: Trajectory) -> list[list[str]]:
    return [f.details["rule_ids"] for f in detector.evaluate_all(trajectory)]


def test_the_trace_side_detector_takes_the_limits_as_arguments() -> None:
    burst = Trajectory(trace_id="t1", conversation_id="burst", tool_calls=_calls(4))
    assert not any("loop.rate" in ids for ids in _rule_ids(ToolGuardDetector(), burst))
    [detector] = detector_registry.create(
        ["tool_guard"], options={"tool_guard": {"rate_limit": 3, "rate_window": 5.0}}
    )
    assert isinstance(detector, ToolGuardDetector)
    fired = _rule_ids(detector, burst.model_copy(update={"conversation_id": "burst-2"}))
    assert ["loop.rate" in ids for ids in fired] == [False, False, False, True]
    loop = Trajectory(trace_id="t2", conversation_id="loop", tool_calls=_calls(3, same=True))
    repeats = _rule_ids(ToolGuardDetector(repeat_limit=3), loop)
    assert ["loop.repeat" in ids for ids in repeats] == [False, False, True]


def test_an_unverified_principal_on_traces_is_warned_when_told_so(tmp_path: Path) -> None:
    principals = tmp_path / "principals.json"
    kim = {"id": "kim", "role": "non_owner", "trust": 3, "verified": False, "uid": "mail:k"}
    principals.write_text(json.dumps({"version": 1, "principals": [kim]}), encoding="utf-8")
    trajectory = Trajectory(
        trace_id="t1",
        requester=Principal(id="kim"),
        tool_calls=[ToolCall(id="c1", name="bash", arguments={"command": "ls"}, span_id="1" * 16)],
    )
    [strict] = ToolGuardDetector(principals=str(principals)).evaluate_all(trajectory)
    [lenient] = ToolGuardDetector(
        principals=str(principals), block_high_risk_unverified=False
    ).evaluate_all(trajectory)
    assert strict.details["decision"] == "BLOCK"
    assert lenient.details["decision"] == "WARN"
    assert (
        lenient.details["rule_ids"]
        == strict.details["rule_ids"]
        == ["identity.unverified_high_risk"]
    )


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        ("repeat_limit = 0", r"\[limits\].*repeat_limit.*greater than or equal to 1"),
        ("rate_window = -1.0", r"\[limits\].*rate_window.*greater than 0"),
        ('block_high_risk_unverified = "no"', r"\[limits\].*block_high_risk_unverified"),
        ("repeats = 3", r"\[limits\].*repeats.*not permitted"),
    ],
)
def test_a_bad_limit_is_a_clear_error(tmp_path: Path, monkeypatch, limits, message) -> None:
    monkeypatch.setenv("OTEL_SAFETY_DATA_DIR", str(_data_dir(tmp_path, limits)))
    with pytest.raises(ValueError, match=message):
        ToolGuardDetector()


def test_a_bad_limit_given_as_an_argument_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match=r"guard setting: rate_limit.*got 0"):
        ToolGuardDetector(rate_limit=0)
    with pytest.raises(ValueError, match=r"guard setting: repeat_limit"):
        Guard(Directory(), repeat_limit="5")
