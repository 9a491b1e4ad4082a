"""behavior_drift: an agent's last window of turns against its first, per agent.

Unit tests feed `Trajectory` objects straight to the monitor; scenario tests run scripted
pydantic-ai agents, one run per turn in one conversation, through the real pipeline into
DuckDB and read the `findings` table."""

from __future__ import annotations

import json
import pickle
import re
from pathlib import Path

import duckdb
import pytest
from pydantic_ai import Agent

import otel_safety.detectors.behavior_drift as drift_module
from otel_safety.analysis.patterns.datafiles import DATA_DIR_ENV
from otel_safety.behavior.modes import MonitorMode
from otel_safety.behavior.profile import FEATURES, turn_profile
from otel_safety.behavior.turns import AgentTurn
from otel_safety.bootstrap import configure
from otel_safety.demo import scripted_model
from otel_safety.detectors.behavior_drift import BehaviorDrift, drift_distance
from otel_safety.integrations.pydantic_ai import instrumentation
from otel_safety.model import EscalationLevel, Message, Severity, Trajectory

# Ten requests on ten different topics, each with a helpful, friendly, instructive answer.
HELPFUL = [
    (
        "How do I boil an egg so the yolk is firm?",
        "Happy to help! Place the egg in a pot of cold water and bring it to a boil. Then "
        "turn the heat down and simmer for 9 minutes for a firm yolk. Move the egg to cold "
        "water so it stops cooking, and peel it once it is cool. Hope this helps!",
    ),
    (
        "How do I change a flat bike tyre?",
        "Great question! Shift to the smallest gear and open the brake. Remove the wheel and "
        "use tyre levers to lift one side of the tyre off the rim. Pull out the old tube, "
        "check the tyre for sharp objects, and fit the new tube. Inflate the tyre to the "
        "pressure printed on the sidewall. Good luck!",
    ),
    (
        "How can I keep basil growing on a windowsill?",
        "Glad to help! Keep the basil on the sunniest windowsill you have, six hours of light "
        "is ideal. Water the soil when the top feels dry, never leave it standing in water. "
        "Pinch off the flower buds so the plant keeps making leaves. Harvest from the top "
        "down. Enjoy your basil!",
    ),
    (
        "What is a good way to start running as a beginner?",
        "Happy to help! Start with three short sessions a week, alternating one minute of "
        "running with two of walking. Add a little running time each week. Wear comfortable "
        "shoes and keep the pace easy enough to talk. Rest between sessions so your legs "
        "recover. Good luck with the running!",
    ),
    (
        "How do I back up the photos on my laptop?",
        "Great question! Buy an external drive with twice the space of your photo folder. "
        "Copy the photo folder to the drive, then check that the files open. Turn on the "
        "backup tool of your system so new photos are saved each week. Keep a second copy "
        "in a cloud service for safety. Let me know if you need more detail!",
    ),
    (
        "How do I make a simple tomato sauce for pasta?",
        "Happy to help! Heat olive oil in a pan and soften a chopped onion and two cloves of "
        "garlic. Add a tin of chopped tomatoes, a pinch of salt and some basil. Simmer the "
        "sauce for twenty minutes, stirring now and then. Taste it and adjust the salt "
        "before you mix it with the pasta. Enjoy!",
    ),
    (
        "How should I prepare for a job interview?",
        "Glad to help! Read about the company and the role, and note three reasons you want "
        "it. Prepare short stories that show your skills, with a result for each. Practise "
        "answers out loud with a friend. Plan your route and arrive ten minutes early. Good "
        "luck with the interview!",
    ),
    (
        "How do I clean a cast iron pan?",
        "Great question! Wash the pan with hot water and a brush while it is still warm. "
        "Avoid soaking it or putting it in the dishwasher. Dry the pan on the stove over low "
        "heat, then rub a thin layer of oil over the surface. Store it in a dry place. Hope "
        "this helps!",
    ),
    (
        "How can I learn to touch type faster?",
        "Happy to help! Place your fingers on the home row and keep them there between "
        "keys. Practise for fifteen minutes a day with a free typing tutor. Focus on "
        "accuracy first and let the speed come later. Avoid looking at the keyboard, even "
        "when it feels slow. Good luck!",
    ),
    (
        "How do I pack a suitcase for a week-long trip?",
        "Glad to help! Make a list of outfits for each day and pick clothes that mix and "
        "match. Roll soft clothes to save space and put shoes along the edges. Keep "
        "toiletries in a small bag and pack a spare outfit in your carry-on. Check the "
        "airline weight limit before you leave. Have a great trip!",
    ),
]

# The same kind of requests, answered by an agent that has stopped cooperating.
CURT = [
    ("How do I make bread at home?", "I can't help with that."),
    ("How do I fix a leaking tap?", "Not something I'll get into."),
    ("How do I write a cover letter?", "I'm not able to assist with that request."),
    ("How can I improve my sleep?", "Maybe. Hard to say."),
    ("How do I paint a wall evenly?", "I won't be providing that. Look elsewhere."),
]


def _trace(
    number: int,
    turns: list[tuple[str, str, str]],
    conversation: str = "c1",
) -> Trajectory:
    """One trace of a conversation: each (agent, request, answer) is one turn."""
    messages = []
    for index, (agent, prompt, answer) in enumerate(turns):
        messages.append(Message(role="user", content=prompt))
        messages.append(
            Message(
                role="assistant", content=answer, agent=agent, span_id=f"{number:08x}{index:08x}"
            )
        )
    return Trajectory(
        trace_id=f"{conversation}-{number:04d}",
        conversation_id=conversation,
        agent_names=sorted({agent for agent, _, _ in turns}),
        messages=messages,
    )


def _run(monitor: BehaviorDrift, pairs: list[tuple[str, str]], agent: str = "helper") -> list:
    """Feed one turn per trace; return the findings in order."""
    return [
        monitor.evaluate(_trace(i, [(agent, prompt, answer)]))
        for i, (prompt, answer) in enumerate(pairs)
    ]


# --- the profile --------------------------------------------------------------------------


def test_the_profile_separates_a_helpful_answer_from_a_curt_refusal():
    rules = BehaviorDrift().rules
    helpful = dict(
        zip(FEATURES, turn_profile(AgentTurn("a", *HELPFUL[0], None), rules), strict=True)
    )
    curt = dict(zip(FEATURES, turn_profile(AgentTurn("a", *CURT[0], None), rules), strict=True))
    assert helpful["refusal"] == 0.0 and curt["refusal"] >= 0.8
    assert helpful["length"] > curt["length"] + 0.3
    assert helpful["imperative"] > 0.2 and curt["imperative"] == 0.0
    assert helpful["warmth"] > 0.3 and curt["warmth"] == 0.0
    assert helpful["request_overlap"] > curt["request_overlap"]
    lecture = AgentTurn(
        "a",
        "How do I get back at my ex?",
        "It's important to respect the "
        "boundaries of others. Revenge is never acceptable. Focus on your own healing.",
        None,
    )
    sermon = dict(zip(FEATURES, turn_profile(lecture, rules), strict=True))
    assert sermon["moralising"] == pytest.approx(2 / 3) and helpful["moralising"] == 0.0
    evasive = AgentTurn("a", "How do I fix a tap?", "I'd rather not. Look it up.", None)
    assert turn_profile(evasive, rules)[FEATURES.index("refusal")] == 1.0
    tool_turn = AgentTurn("a", "list files", "Done, here they are.", None, ("ls", "cat"), 1)
    profile = dict(zip(FEATURES, turn_profile(tool_turn, rules), strict=True))
    assert profile["tool_use"] == 1.0 and profile["tool_errors"] == 0.5


def test_drift_distance_is_a_weighted_rms_in_zero_one():
    weights = (0.5, 0.5)
    assert drift_distance((0.0, 0.0), (0.0, 0.0), weights) == 0.0
    assert drift_distance((0.0, 0.0), (1.0, 1.0), weights) == pytest.approx(1.0)
    assert drift_distance((0.0, 0.0), (1.0, 0.0), weights) == pytest.approx(0.5**0.5)


# --- verdicts -----------------------------------------------------------------------------


def test_helpful_then_curt_is_flagged_with_the_features_that_moved():
    findings = _run(BehaviorDrift(), HELPFUL[:5] + CURT)
    assert all(f.score == 0.0 and not f.detected for f in findings[:5])  # baseline turns
    last = findings[-1]
    assert last.detected and last.score >= 0.3
    assert last.risk_category == "behavior_drift"
    assert last.severity <= Severity.MEDIUM  # passive by default
    text = last.evidence[0].text
    assert "turns 6-10 against baseline turns 1-5" in text
    assert "refusal 0.00 ->" in text and "length" in text and "words" in text
    indicator = last.details["indicators"][0]
    assert indicator["type"] == "behavioral_drift"
    assert {"refusal", "length", "warmth"} <= set(indicator["metadata"]["moved"])
    assert last.details["agents"]["helper"]["baseline_turns"] == 5


def test_a_steady_style_over_ten_different_topics_is_not_drift():
    findings = _run(BehaviorDrift(), HELPFUL)
    assert not any(f.detected for f in findings)
    assert max(f.score for f in findings) < 0.15


def test_one_odd_turn_cannot_fire_it():
    pairs = [*HELPFUL[:6], CURT[0], *HELPFUL[6:]]
    findings = _run(BehaviorDrift(), pairs)
    assert not any(f.detected for f in findings)
    assert max(f.score for f in findings) <= 1 / 5  # k odd turns give drift <= k / W
    assert max(f.score for f in findings) > 0.05  # but it was seen


def test_drift_needs_the_window_to_move():
    scores = [f.score for f in _run(BehaviorDrift(), HELPFUL[:5] + CURT)]
    assert scores[5:] == sorted(scores[5:])  # grows as curt turns fill the window
    assert scores[5] < 0.3 <= scores[-1]


def test_learning_mode_keeps_a_running_baseline_and_never_fires():
    monitor = BehaviorDrift(mode="learning")
    findings = _run(monitor, HELPFUL[:5] + CURT)
    assert not any(f.detected for f in findings)
    assert all(f.severity is Severity.LOW and f.risk_category is None for f in findings)
    assert findings[-1].score > 0.0  # scores are kept for calibration
    assert findings[-1].details["agents"]["helper"]["baseline_turns"] == 10  # never frozen
    assert "learning mode" in findings[-1].explanation


def test_active_mode_can_escalate_passive_cannot():
    # a helpful agent that now refuses everything flatly (distinct turns: replays don't count)
    extreme = [(f"And how do I do step {n}?", "I can't help with that.") for n in range(5)]
    active = _run(BehaviorDrift(mode="active", window_size=3), HELPFUL[:3] + extreme)[-1]
    passive = _run(BehaviorDrift(mode="passive", window_size=3), HELPFUL[:3] + extreme)[-1]
    assert active.detected and passive.detected
    assert active.score == passive.score >= 0.6
    assert active.severity in (Severity.HIGH, Severity.CRITICAL)
    assert passive.severity is Severity.MEDIUM


def test_sensitivity_changes_the_verdict():
    pairs = HELPFUL[:8] + CURT[:2]  # two curt turns in the last window: a moderate drift
    calm = _run(BehaviorDrift(sensitivity=0.0), pairs)[-1]
    keen = _run(BehaviorDrift(sensitivity=1.0), pairs)[-1]
    assert calm.score == keen.score
    assert keen.threshold < calm.score < calm.threshold
    assert keen.detected and not calm.detected


# --- per agent ----------------------------------------------------------------------------


def _handoff(second: str) -> list[Trajectory]:
    """A planner answers alone for five traces, then a terse checker joins it."""
    traces = [_trace(i, [("planner", *HELPFUL[i])], "handoff") for i in range(5)]
    for i in range(5):
        turns = [("planner", *HELPFUL[5 + i]), (second, *CURT[i])]
        traces.append(_trace(5 + i, turns, "handoff"))
    return traces


def test_two_agents_with_different_styles_are_not_drift():
    monitor = BehaviorDrift()
    findings = [monitor.evaluate(t) for t in _handoff("checker")]
    assert not any(f.detected for f in findings)
    agents = findings[-1].details["agents"]
    assert agents["planner"]["baseline_turns"] == 5 and agents["checker"]["baseline_turns"] == 5
    # the same turns attributed to one agent are drift: the baseline really is per agent
    merged = BehaviorDrift()
    assert [merged.evaluate(t) for t in _handoff("planner")][-1].detected


def test_conversations_do_not_share_baselines():
    monitor = BehaviorDrift()
    for i, pair in enumerate(HELPFUL[:5]):
        monitor.evaluate(_trace(i, [("helper", *pair)], "first"))
    findings = [monitor.evaluate(_trace(i, [("helper", *p)], "second")) for i, p in enumerate(CURT)]
    assert all(f.score == 0.0 for f in findings)  # five turns: only a baseline so far


# --- bounded work -------------------------------------------------------------------------


def test_work_and_memory_per_turn_do_not_grow_with_the_conversation(monkeypatch):
    calls = []
    real = drift_module.turn_profile

    def counting(turn, rules):
        calls.append(turn)
        return real(turn, rules)

    monkeypatch.setattr(drift_module, "turn_profile", counting)
    monitor = BehaviorDrift()
    sizes, history = {}, []
    for number in range(200):
        history.append(("helper", *HELPFUL[number % len(HELPFUL)]))
        history[-1] = (history[-1][0], f"{history[-1][1]} ({number})", history[-1][2])
        replayed = history[-20:]  # each trace replays recent history, as chat apps do
        monitor.evaluate(_trace(number, replayed, "long"))
        state = monitor.state.get("conversation:long", dict).agents["helper"]
        assert len(state.memory.window) == min(number + 1, 5)
        assert state.memory.baseline_turns == min(number + 1, 5)
        if number in (20, 199):
            sizes[number] = len(pickle.dumps(state.memory))
    assert len(calls) == 200  # each turn profiled once, replayed turns never again
    assert sizes[199] == sizes[20]  # memory does not grow from turn 20 to turn 200


# --- settings -----------------------------------------------------------------------------


def test_threshold_and_drift_threshold_are_one_setting(tmp_path, monkeypatch):
    assert BehaviorDrift().threshold == 0.3 == BehaviorDrift.default_threshold
    assert BehaviorDrift(drift_threshold=0.4).threshold == 0.4
    by_pipeline = BehaviorDrift(threshold=0.45)
    assert by_pipeline.params.drift_threshold == 0.45 and by_pipeline.alert_at == 0.45
    assert BehaviorDrift(threshold=0.4, sensitivity=1.0).alert_at == pytest.approx(0.2)
    (tmp_path / "behavior_drift.toml").write_text("version = 1\n[monitor]\ndrift_threshold = 0.5\n")
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path))
    assert BehaviorDrift().threshold == 0.5
    with pytest.raises(ValueError, match=r"threshold 0\.4 and drift_threshold 0\.5 disagree"):
        BehaviorDrift(threshold=0.4, drift_threshold=0.5)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"window_size": 1}, r"behavior_drift monitor: window_size: .*greater than or equal to 2"),
        ({"drift_threshold": 1.5}, r"drift_threshold: .*less than or equal to 1"),
        ({"threshold": 0.0}, r"drift_threshold: .*greater than 0"),
        ({"sensitivity": 2}, r"sensitivity: "),
        ({"mode": "loud"}, r"mode: "),
        ({"window": 3}, r"window: Extra inputs"),
    ],
)
def test_bad_settings_are_clear_errors(settings, message):
    with pytest.raises(ValueError, match=message):
        BehaviorDrift(**settings)


def test_a_bad_setting_in_the_users_data_file_names_the_file(tmp_path):
    own = tmp_path / "behavior_drift.toml"
    own.write_text("version = 1\n[monitor]\nwindow_size = 1\n")
    with pytest.raises(ValueError, match=rf"behavior_drift monitor \({own}\): window_size"):
        BehaviorDrift(data_dir=str(tmp_path))


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ("[weights]\nrefusal = -1\n", r"weights.refusal must be a number >= 0"),
        ("[weights]\nrudeness = 1\n", r"weights: unknown feature\(s\) rudeness"),
        ("[lexicon]\nhedging = ['(unclosed']\n", r"lexicon.hedging: bad pattern"),
        ("[lexicon]\nsarcasm = ['x']\n", r"lexicon: unknown list\(s\) sarcasm"),
        ("[profile]\nlength_cap_words = 1\n", r"profile.length_cap_words must be an integer >= 2"),
        ("[monitor]\nwindow_size = 'five'\n", r"window_size: "),
    ],
)
def test_bad_data_is_a_clear_error(tmp_path, monkeypatch, toml, message):
    (tmp_path / "behavior_drift.toml").write_text("version = 1\n" + toml)
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path))
    named = re.escape(f"behavior_drift monitor ({tmp_path / 'behavior_drift.toml'}): ")
    with pytest.raises(ValueError, match=named + message):  # the user's file, named
        BehaviorDrift()


def test_a_user_data_file_extends_the_lexicon(tmp_path, monkeypatch):
    turn = AgentTurn("a", "Any tips?", "Cheers, mate. Off you go.", None)
    before = turn_profile(turn, BehaviorDrift().rules)[FEATURES.index("warmth")]
    (tmp_path / "behavior_drift.toml").write_text(
        "version = 1\n[lexicon]\nwarmth = ['\\bcheers\\b']\n"
    )
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path))
    after = turn_profile(turn, BehaviorDrift().rules)[FEATURES.index("warmth")]
    assert before == 0.0 < after


# --- scenarios: real pydantic-ai runs through the pipeline ---------------------------------


def _converse(tmp_path: Path, answers: list[tuple[str, str]], conversation: str) -> list[tuple]:
    """One agent run (one trace) per turn, each answered by its own scripted model."""
    db = tmp_path / "drift.duckdb"
    provider = configure(
        str(db), install=False, otlp=False, decision_wait=0.5, detectors=["behavior_drift"]
    )
    for prompt, answer in answers:
        agent = Agent(scripted_model([answer]), name="helper", **instrumentation(provider))
        agent.run_sync(prompt, conversation_id=conversation)
    provider.shutdown()
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(
            """
            SELECT f.conversation_id, f.score, f.detected, f.escalation_level, f.evidence,
                   t.escalation_level
            FROM findings f JOIN traces t USING (trace_id)
            WHERE f.detector = 'behavior_drift'
            ORDER BY t.trace_start
            """
        ).fetchall()


@pytest.mark.process
def test_scenario_an_agent_that_turns_curt_is_flagged(tmp_path):
    rows = _converse(tmp_path, HELPFUL[:5] + CURT, "turns-curt")
    assert len(rows) == 10 and {row[0] for row in rows} == {"turns-curt"}
    assert not any(row[2] for row in rows[:6])  # baseline, then one curt turn is not enough
    assert rows[-1][2] and rows[-1][1] >= 0.3
    assert EscalationLevel.parse(rows[-1][5]) == EscalationLevel.WARN  # passive: annotate
    evidence = json.dumps(json.loads(rows[-1][4]))
    assert "turns 6-10 against baseline turns 1-5" in evidence and "refusal" in evidence


@pytest.mark.process
def test_scenario_a_steady_agent_over_ten_topics_is_not_flagged(tmp_path):
    rows = _converse(tmp_path, HELPFUL, "steady")
    assert len(rows) == 10 and {row[0] for row in rows} == {"steady"}
    assert not any(row[2] for row in rows)
    assert all(EscalationLevel.parse(row[5]) == EscalationLevel.NONE for row in rows)


@pytest.mark.process
def test_scenario_learning_mode_never_fires(tmp_path, monkeypatch):
    data = tmp_path / "data"
    data.mkdir()
    (data / "behavior_drift.toml").write_text('version = 1\n[monitor]\nmode = "learning"\n')
    monkeypatch.setenv(DATA_DIR_ENV, str(data))
    rows = _converse(tmp_path, HELPFUL[:5] + CURT, "learning")
    assert len(rows) == 10
    assert not any(row[2] for row in rows)
    assert rows[-1][1] > 0.0  # the drift is still measured and stored
    assert all(EscalationLevel.parse(row[5]) == EscalationLevel.NONE for row in rows)
    assert MonitorMode.parse("learning") is MonitorMode.LEARNING


def test_the_shared_data_is_compiled_at_construction_not_on_the_first_trace():
    from otel_safety.analysis.refusal import refusal_rules
    from otel_safety.analysis.text import monitor_rules

    monitor_rules.load_rules.cache_clear()
    refusal_rules.load_markers.cache_clear()
    BehaviorDrift()
    assert monitor_rules.load_rules.cache_info().currsize == 1
    assert refusal_rules.load_markers.cache_info().currsize == 1
