"""The safeguards table, its adaptive variant and the signals contract."""

from __future__ import annotations

import pytest

from otel_safety.model import EscalationLevel, Finding, Severity, Trajectory
from otel_safety.pipeline import Pipeline
from otel_safety.policies import AdaptivePolicy, SafeguardsPolicy, finding_signals
from otel_safety.policy import SeverityPolicy

L = EscalationLevel


def finding(
    detected: bool = False,
    severity: Severity = Severity.LOW,
    signals: dict | None = None,
    detector: str = "monitor",
    **details,
) -> Finding:
    extra = {"signals": signals} if signals is not None else {}
    return Finding(
        detector=detector,
        trace_id="t" * 32,
        score=0.5,
        threshold=0.5,
        detected=detected,
        severity=severity,
        details={**details, **extra} or None,
    )


_traces = iter(range(1, 1 << 30))


def conversation(cid: str | None, trace: int | None = None) -> Trajectory:
    """A trace of conversation `cid`: a new one each call unless `trace` names one."""
    return Trajectory(trace_id=f"{trace or next(_traces):032x}", conversation_id=cid)


@pytest.mark.parametrize(
    ("signals", "level"),
    [
        ({"violation": True}, L.HARD_STOP),
        ({"drift": 0.8}, L.HARD_STOP),
        ({"drift": 0.6, "uncertainty": 0.4}, L.HUMAN_REVIEW),
        ({"drift": 0.5}, L.SOFT_STOP),
        ({"tool_risk": 0.7}, L.SOFT_STOP),
        ({"uncertainty": 0.4}, L.CLARIFY),
        ({"drift": 0.3}, L.WARN),
        # Just under each cut-off falls to the next row.
        ({"drift": 0.79}, L.SOFT_STOP),
        ({"drift": 0.6, "uncertainty": 0.39}, L.SOFT_STOP),
        ({"drift": 0.49}, L.WARN),
        ({"tool_risk": 0.69}, L.NONE),
        ({"uncertainty": 0.39}, L.NONE),
        ({"drift": 0.29}, L.NONE),
        ({"violation": False, "drift": "high"}, L.NONE),  # bad values are not signals
    ],
)
def test_safeguards_table_rows(signals, level) -> None:
    f = finding(signals=signals)
    assert SafeguardsPolicy().decide([f]) == level
    assert f.escalation == level


def test_signals_from_two_findings_combine_on_the_trace() -> None:
    drift, unsure = finding(signals={"drift": 0.65}), finding(signals={"uncertainty": 0.5})
    assert SafeguardsPolicy().decide([drift, unsure]) == L.HUMAN_REVIEW
    assert (drift.escalation, unsure.escalation) == (L.SOFT_STOP, L.CLARIFY)


def test_severity_wins_when_stricter_and_table_when_stricter() -> None:
    critical = finding(detected=True, severity=Severity.CRITICAL, signals={"drift": 0.3})
    assert SafeguardsPolicy().decide([critical]) == L.HARD_STOP
    medium = finding(detected=True, severity=Severity.MEDIUM, signals={"drift": 0.5})
    assert SafeguardsPolicy().decide([medium]) == L.SOFT_STOP


@pytest.mark.parametrize("severity", list(Severity))
@pytest.mark.parametrize("detected", [True, False])
def test_without_signals_it_is_the_severity_policy(severity, detected) -> None:
    ours, theirs = finding(detected, severity), finding(detected, severity)
    assert SafeguardsPolicy().decide([ours]) == SeverityPolicy().decide([theirs])
    assert ours.escalation == theirs.escalation


def test_tool_guard_risk_is_tool_risk_only_when_it_fired() -> None:
    fired = finding(True, Severity.MEDIUM, detector="tool_guard", risk=75)
    assert finding_signals(fired).tool_risk == 0.75
    assert SafeguardsPolicy().decide([fired]) == L.SOFT_STOP  # MEDIUM alone would be WARN
    quiet = finding(False, Severity.LOW, detector="tool_guard", risk=75)
    assert finding_signals(quiet).tool_risk == 0
    assert SafeguardsPolicy().decide([quiet]) == L.NONE


def test_default_guard_verdicts_keep_their_levels(span_factory) -> None:
    """The guard's own severities already exceed SOFT_STOP from risk 70: nothing changes."""
    for risk, severity in ((40, Severity.MEDIUM), (70, Severity.HIGH), (90, Severity.CRITICAL)):
        ours = finding(True, severity, detector="tool_guard", risk=risk)
        theirs = finding(True, severity, detector="tool_guard", risk=risk)
        assert SafeguardsPolicy().decide([ours]) == SeverityPolicy().decide([theirs])


def test_adaptive_at_neutral_settings_is_the_table() -> None:
    for drift in (0.29, 0.3, 0.5, 0.8):
        a, b = finding(signals={"drift": drift}), finding(signals={"drift": drift})
        assert AdaptivePolicy().decide([a]) == SafeguardsPolicy().decide([b])


@pytest.mark.parametrize(
    ("sensitivity", "multiplier", "level"),
    [
        (0.5, 1.0, L.WARN),  # drift 0.3 as the table has it
        (1.0, 1.0, L.SOFT_STOP),  # cut-offs halved: 0.3 >= 0.25 (soft stop)
        (0.5, 2.0, L.SOFT_STOP),  # risky context halves them too
        (0.0, 1.0, L.NONE),  # cut-offs x1.5: 0.3 < 0.45 (warn)
        (0.5, 0.5, L.NONE),  # a sandbox doubles them
    ],
)
def test_adaptive_scales_the_cut_offs(sensitivity, multiplier, level) -> None:
    policy = AdaptivePolicy(sensitivity, multiplier)
    assert policy.decide([finding(signals={"drift": 0.3})]) == level


def test_adaptive_history_lowers_cut_offs_per_conversation() -> None:
    policy = AdaptivePolicy(history_weight=0.25, history_cap=2, max_conversations=2)
    # drift 0.35: WARN at first; after two escalations the soft-stop cut-off is 0.5/1.5.
    assert policy.decide([finding(signals={"drift": 0.35})], conversation("a")) == L.WARN
    assert policy.decide([finding(signals={"drift": 0.35})], conversation("a")) == L.WARN
    assert policy.escalations("a") == 2
    assert policy.decide([finding(signals={"drift": 0.35})], conversation("a")) == L.SOFT_STOP
    # Another conversation starts fresh; and no conversation id means no history.
    assert policy.decide([finding(signals={"drift": 0.35})], conversation("b")) == L.WARN
    assert policy.decide([finding(signals={"drift": 0.35})], conversation(None)) == L.WARN
    assert policy.escalations(None) == 0
    # Bounded: a third conversation pushes out the oldest.
    policy.decide([finding(signals={"drift": 0.35})], conversation("c"))
    assert policy.escalations("a") == 0 and policy.escalations("c") == 1


def test_a_trace_judged_again_counts_once_and_not_against_itself() -> None:
    """Each re-judgement of one trace (late spans) counted as another escalation, tightening
    the cut-offs on duplicates."""
    policy = AdaptivePolicy(history_weight=0.25, history_cap=2)
    drift = [finding(signals={"drift": 0.35})]
    for _ in range(3):
        assert policy.decide(drift, conversation("a", trace=7)) == L.WARN
    assert policy.escalations("a") == 1
    assert policy.escalations("a", current=f"{7:032x}") == 0


def test_adaptive_refuses_bad_settings() -> None:
    with pytest.raises(ValueError, match="sensitivity"):
        AdaptivePolicy(sensitivity=1.5)
    with pytest.raises(ValueError, match="risk_multiplier"):
        AdaptivePolicy(risk_multiplier=0)
    with pytest.raises(ValueError, match="sensitivity must be a number, got 'high'"):
        AdaptivePolicy(sensitivity="high")


def test_pipeline_default_is_the_safeguards_policy(span_factory) -> None:
    assert isinstance(Pipeline(detectors=[]).policy, SafeguardsPolicy)


def test_a_misspelt_detector_level_is_refused_and_a_right_one_pins_the_level() -> None:
    with pytest.raises(ValueError, match="detector_levels names no detector: injecton"):
        SafeguardsPolicy(detector_levels={"injecton": "clarify"})
    with pytest.raises(ValueError, match="names no detector: over_refusl"):
        SeverityPolicy(detector_levels={"over_refusl": "NONE"})
    quiet = SafeguardsPolicy(detector_levels={"tool_guard": "NONE"})
    risky = Finding(
        detector="tool_guard", trace_id="t" * 32, score=0.9, threshold=0.5, detected=True,
        severity=Severity.HIGH, details={"risk": 80, "signals": {"violation": True}},
    )  # fmt: skip
    # Pinned quieter, its signals raised it back to the table's SOFT_STOP and more.
    assert SafeguardsPolicy().decide([risky.model_copy()], None) == EscalationLevel.HARD_STOP
    assert quiet.decide([risky], None) == EscalationLevel.NONE
    assert risky.escalation == EscalationLevel.NONE
