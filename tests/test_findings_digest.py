"""tools/findings_digest.py: two checkouts' findings on the labelled cases, compared."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOOL = ROOT / "tools" / "findings_digest.py"


def _load_tool():
    spec = importlib.util.spec_from_file_location("findings_digest", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _record(case_id: str, level: str, score: float, run_set: str | None = None) -> dict:
    finding = ["deception", level != "NONE", score, level, "why"]
    return {"dataset": "d", "set": run_set, "id": case_id, "level": level, "findings": [finding]}


def test_a_digest_of_the_same_checkout_twice_differs_nowhere(shared_data, tmp_path, capsys):
    tool = _load_tool()
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    for out in (first, second):
        assert (
            tool.main(["digest", "--data", str(shared_data), "--out", str(out), "--sample", "2"])
            == 0
        )
    records = [json.loads(line) for line in first.read_text().splitlines()]
    assert len({r["dataset"] for r in records}) >= 5  # every dataset gave its sample
    assert all(r["findings"] for r in records if r["level"] != "NONE")
    assert not any("span_id" in json.dumps(r) for r in records)
    assert tool.main(["compare", str(first), str(second)]) == 0
    assert f"{len(records)} cases; 0 differ" in capsys.readouterr().out


def test_a_changed_finding_is_counted_and_shown_unless_its_set_is_blind():
    tool = _load_tool()
    before = [_record("read", "NONE", 0.1, "set2"), _record("blind", "NONE", 0.1, "set3")]
    after = [_record("read", "HARD_STOP", 0.9, "set2"), _record("blind", "WARN", 0.5, "set3")]
    differing, shown = tool.compare(before, after)
    assert differing == {"set2": 1, "set3": 1}
    assert len(shown) == 1 and shown[0].startswith("read: NONE -> HARD_STOP")
    assert not any("blind" in line for line in shown)


def test_compare_exits_non_zero_when_a_case_differs(tmp_path, capsys):
    tool = _load_tool()
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    first.write_text(json.dumps(_record("x", "NONE", 0.1, "set2")) + "\n")
    second.write_text(json.dumps(_record("x", "WARN", 0.4, "set2")) + "\n")
    assert tool.main(["compare", str(first), str(second)]) == 1
    assert "1 cases; 1 differ (set2 1)" in capsys.readouterr().out
