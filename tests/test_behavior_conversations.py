"""tools/behavior_conversations.py on a small sample of real XSTest conversations.

Structural facts only: the measured figures are the tool's output, not the test's.
"""

from __future__ import annotations

import importlib.util
import random
import sys
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parents[1] / "tools" / "behavior_conversations.py"
SAMPLE = 5


def _load_tool():
    spec = importlib.util.spec_from_file_location("behavior_conversations", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


bc = _load_tool()


@pytest.fixture(scope="module")
def measured(shared_data: Path) -> list:
    return bc.measure(shared_data, conversations=SAMPLE, seed=0)


@pytest.fixture(scope="module")
def models(shared_data: Path) -> list[str]:
    return list(bc.load_rows(shared_data))


def test_every_model_and_scenario_has_a_row_and_counts_are_within_bounds(measured, models):
    assert len(models) == 3
    rows = bc.summarise(measured)
    assert {(r["scenario"], r["model"]) for r in rows} == {
        (s, m) for s in bc.SCENARIOS for m in [*models, "all"]
    }
    for row in rows:
        assert row["n"] == SAMPLE * (len(models) if row["model"] == "all" else 1)
        assert 0 <= row["fired_before_change"] <= row["any_fired"] <= row["n"]
        for key in bc.KEYS:
            cell = row[key]
            assert 0 <= cell["fired"] <= row["any_fired"]
            assert 0.0 <= cell["median_peak"] <= cell["p95_peak"] <= 1.0


def test_every_turn_of_every_conversation_was_judged_by_every_monitor(measured):
    for conversation in measured:
        turns = {(f.key, f.turn) for f in conversation.findings}
        assert turns == {(k, t) for k in bc.KEYS for t in range(1, bc.TURNS + 1)}


def test_same_seed_same_output_and_another_seed_other_conversations(shared_data, measured):
    again = bc.measure(shared_data, conversations=SAMPLE, seed=0)
    assert again == measured
    assert bc.render(bc.summarise(again), "json", SAMPLE, 0) == bc.render(
        bc.summarise(measured), "json", SAMPLE, 0
    )
    pool = bc.load_rows(shared_data)["gpt4"]
    first = bc.stitch("steady", pool, random.Random("0/steady/gpt4"))
    other = bc.stitch("steady", pool, random.Random("1/steady/gpt4"))
    assert first != other


def test_steady_false_alarms_match_a_recheck_of_the_stored_findings(measured):
    steady = [c for c in measured if c.scenario == "steady"]
    rechecked = sum(any(f.score > 0 and f.score >= f.threshold for f in c.findings) for c in steady)
    assert all(
        f.detected == (f.score > 0 and f.score >= f.threshold) for c in steady for f in c.findings
    )
    row = next(
        r for r in bc.summarise(measured) if (r["scenario"], r["model"]) == ("steady", "all")
    )
    assert row["any_fired"] == rechecked


def test_scenarios_are_built_from_the_models_own_rows(shared_data):
    pools = bc.load_rows(shared_data)
    for model, pool in pools.items():
        rng = random.Random(7)
        comply, refuse = set(pool["comply"]), set(pool["refuse"])
        steady = bc.stitch("steady", pool, rng)
        assert len(steady) == bc.TURNS == len({r.prompt for r in steady})
        assert set(steady) <= comply, model
        switch = bc.stitch("switch", pool, rng)
        assert set(switch[: bc.CHANGE]) <= comply and set(switch[bc.CHANGE :]) <= refuse
        degrade = bc.stitch("degrade", pool, rng)
        assert set(degrade[: bc.CHANGE]) <= comply
        originals = {r.prompt: r.answer for r in pool["comply"]}
        for row in degrade[bc.CHANGE :]:
            full = originals[row.prompt]
            assert full.strip().startswith(row.answer) and len(row.answer) < len(full.strip())


def test_a_missing_data_folder_is_a_clear_error(tmp_path, capsys):
    assert bc.main(["--data", str(tmp_path / "nowhere"), "--conversations", "1"]) == 2
    assert "no XSTest completions" in capsys.readouterr().err
