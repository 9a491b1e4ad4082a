"""The semantic-convention registry, its generator and the generated `otel_safety.semconv`."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from otel_safety import buffer, semconv
from otel_safety.model import EscalationLevel, Severity

REPO_ROOT = Path(__file__).resolve().parent.parent
SEMCONV_DIR = REPO_ROOT / "semconv"
REGISTRY_DIR = SEMCONV_DIR / "registry"
GENERATOR = SEMCONV_DIR / "generate.py"

ESCALATION_LEVEL_ATTRIBUTES = (
    "otel_safety.escalation.level",
    "otel_safety.trace.escalation.level",
    "otel_safety.finding.escalation.level",
)


def _load_generator(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    spec = importlib.util.spec_from_file_location("semconv_generate", GENERATOR)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # Dataclasses look their module up in sys.modules while the class body runs.
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    return module


def _raw_groups() -> list[dict]:
    groups: list[dict] = []
    for path in sorted(REGISTRY_DIR.rglob("*.yaml")):
        groups.extend(yaml.safe_load(path.read_text(encoding="utf-8"))["groups"])
    return groups


def _raw_attributes() -> dict[str, dict]:
    return {
        attribute["id"]: attribute
        for group in _raw_groups()
        if group["type"] == "attribute_group"
        for attribute in group["attributes"]
    }


@pytest.mark.process
def test_generated_files_are_up_to_date() -> None:
    result = subprocess.run(
        [sys.executable, str(GENERATOR), "--check"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_check_reports_stale_files_and_regeneration_fixes_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    generator = _load_generator(monkeypatch)
    markdown, module = tmp_path / "attributes.md", tmp_path / "semconv.py"
    markdown.write_text("stale\n", encoding="utf-8")
    monkeypatch.setattr(generator, "MARKDOWN_PATH", markdown)
    monkeypatch.setattr(generator, "MODULE_PATH", module)  # missing counts as stale

    assert generator.main(["--check"]) == 1
    err = capsys.readouterr().err
    assert "attributes.md is out of date" in err
    assert "semconv.py is out of date" in err

    assert generator.main([]) == 0
    assert generator.main(["--check"]) == 0
    assert module.read_text(encoding="utf-8") == Path(semconv.__file__).read_text(encoding="utf-8")
    assert markdown.read_text(encoding="utf-8") == (SEMCONV_DIR / "attributes.md").read_text(
        encoding="utf-8"
    )


def test_generated_module_docstring_names_the_command() -> None:
    assert semconv.__doc__ is not None
    assert "semconv/registry" in semconv.__doc__
    assert "python semconv/generate.py" in semconv.__doc__


def test_registry_defines_the_expected_attributes() -> None:
    expected = {
        "otel_safety.escalation.level",
        "otel_safety.escalation.rank",
        "otel_safety.trace.escalation.level",
        "otel_safety.trace.escalation.rank",
        "otel_safety.trace.escalation.by_policy",
        "otel_safety.detectors.fired",
        "otel_safety.trace.detectors.fired",
        "otel_safety.detector.score",
        "otel_safety.evaluated",
        "otel_safety.trace.evaluation.reason",
        "otel_safety.mapping.dialect",
        "otel_safety.notes",
        "otel_safety.finding.severity",
        "otel_safety.finding.threshold",
        "otel_safety.finding.escalation.level",
        "gen_ai.evaluation.name",
        "gen_ai.evaluation.score.value",
        "gen_ai.evaluation.score.label",
        "gen_ai.evaluation.explanation",
        "gen_ai.guardrail.verdict.type",
        "gen_ai.guardrail.verdict.reason",
        "gen_ai.guardrail.action.type",
        "gen_ai.guardrail.component.name",
        "gen_ai.guardrail.target.type",
        "gen_ai.guardrail.target.subtype",
        "gen_ai.guardrail.security.risk.category",
        "gen_ai.guardrail.security.risk.score",
        "gen_ai.guardrail.security.policy.id",
        "otel_safety.eval.case_id",
        "otel_safety.eval.dataset",
        "otel_safety.guard.decision",
        "otel_safety.guard.risk",
        "otel_safety.guard.category",
        "otel_safety.guard.rule_ids",
        "otel_safety.guard.reasons",
        "otel_safety.guard.requester",
        "otel_safety.guard.trust",
        "otel_safety.guard.approval",
        "otel_safety.guard.approval_id",
        "otel_safety.guard.approval_by",
        "otel_safety.guard.signature",
        "otel_safety.finding.calibrated",
        "otel_safety.detectors.uncalibrated",
        "otel_safety.deep.model",
        "otel_safety.deep.prompt_version",
        "otel_safety.deep.verdict",
        "gen_ai.response.id",
    }
    assert set(_raw_attributes()) == expected


def test_every_attribute_has_type_brief_and_stability() -> None:
    attributes = _raw_attributes()
    assert attributes
    problems = []
    for attr_id, attribute in attributes.items():
        for key in ("type", "brief", "stability"):
            if not attribute.get(key):
                problems.append(f"{attr_id}: no {key}")
        if not attribute.get("examples"):
            problems.append(f"{attr_id}: no examples")
        if isinstance(attribute.get("type"), dict):
            for member in attribute["type"]["members"]:
                for key in ("id", "value", "brief", "stability"):
                    if member.get(key) in (None, ""):
                        problems.append(f"{attr_id} member {member.get('id')!r}: no {key}")
    assert problems == []


def test_event_groups_refer_only_to_defined_attributes() -> None:
    events = [group for group in _raw_groups() if group["type"] == "event"]
    assert sorted(event["name"] for event in events) == sorted(
        [semconv.GEN_AI_EVALUATION_RESULT, semconv.RUN_GUARDRAIL]
    )
    for event in events:
        refs = [item["ref"] for item in event["attributes"]]
        assert refs
        assert all(semconv.is_defined(ref) for ref in refs), refs


def test_generated_level_table_matches_the_yaml_and_covers_every_level() -> None:
    rows = yaml.safe_load((SEMCONV_DIR / "guardrail_levels.yaml").read_text(encoding="utf-8"))
    rows = rows["levels"]
    names = [level.name for level in EscalationLevel]
    assert [row["level"] for row in rows] == names
    assert {row["level"]: row["verdict"] for row in rows} == semconv.GUARDRAIL_VERDICT_BY_LEVEL
    assert {row["level"]: row["action"] for row in rows} == semconv.GUARDRAIL_ACTION_BY_LEVEL
    assert set(semconv.GUARDRAIL_VERDICT_BY_LEVEL.values()) <= set(
        semconv.GEN_AI_GUARDRAIL_VERDICT_TYPES
    )
    assert set(semconv.GUARDRAIL_ACTION_BY_LEVEL.values()) <= set(
        semconv.GEN_AI_GUARDRAIL_ACTION_TYPES
    )
    assert sorted(semconv.GUARD_DECISION_LEVELS) == sorted(semconv.GUARD_DECISIONS)
    assert set(semconv.GUARD_DECISION_LEVELS.values()) <= set(names)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda rows: rows[0].update(verdict="maybe"), "verdict 'maybe' is not a value of"),
        (lambda rows: rows.pop(2), "list each level once, in order"),
        (lambda rows: rows[1].update(guard_decision="BLOCK"), "each guard decision must stand"),
    ],
)
def test_generator_rejects_a_level_table_that_disagrees_with_the_registry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, edit, message: str
) -> None:
    generator = _load_generator(monkeypatch)
    document = yaml.safe_load((SEMCONV_DIR / "guardrail_levels.yaml").read_text(encoding="utf-8"))
    edit(document["levels"])
    table = tmp_path / "guardrail_levels.yaml"
    table.write_text(yaml.safe_dump(document), encoding="utf-8")
    with pytest.raises(generator.RegistryError, match=message):
        generator.load_registry(levels_path=table)


@pytest.mark.parametrize(
    "key",
    [
        semconv.OTEL_SAFETY_ESCALATION_LEVEL,
        "otel_safety.trace.escalation.rank",
        "otel_safety.evaluated",
        "gen_ai.evaluation.score.value",
        "gen_ai.guardrail.security.risk.category",
        "otel_safety.detector.score.prompt_injection",
        semconv.OTEL_SAFETY_DETECTOR_SCORE_PREFIX + "scope_escalation",
    ],
)
def test_is_defined_accepts_registry_keys(key: str) -> None:
    assert semconv.is_defined(key)


@pytest.mark.parametrize(
    "key",
    [
        "otel_safety.made_up",
        "otel_safety.detector.score",  # the template itself is not a key
        "otel_safety.detector.score.",  # a template key needs a suffix
        "otel_safety.escalation",
        "otel_safety.escalation.level.extra",
        "gen_ai.request.model",
        "",
    ],
)
def test_is_defined_rejects_unknown_keys(key: str) -> None:
    assert not semconv.is_defined(key)


def test_defined_attributes_match_the_yaml() -> None:
    raw = _raw_attributes()
    templates = {key for key, attr in raw.items() if str(attr["type"]).startswith("template[")}
    assert set(raw) - templates == semconv.DEFINED_ATTRIBUTES
    assert {prefix.removesuffix(".") for prefix in semconv.TEMPLATE_PREFIXES} == templates


@pytest.mark.parametrize("attr_id", ESCALATION_LEVEL_ATTRIBUTES)
def test_escalation_level_members_match_the_model(attr_id: str) -> None:
    members = _raw_attributes()[attr_id]["type"]["members"]
    names = [level.name for level in sorted(EscalationLevel)]
    assert [member["value"] for member in members] == names
    assert [member["id"] for member in members] == [name.lower() for name in names]


def test_generated_enum_tuples_match_the_model() -> None:
    names = tuple(level.name for level in sorted(EscalationLevel))
    for generated in (
        semconv.ESCALATION_LEVELS,
        semconv.TRACE_ESCALATION_LEVELS,
        semconv.FINDING_ESCALATION_LEVELS,
    ):
        assert generated == names
    severities = tuple(severity.value for severity in Severity)
    assert severities == semconv.FINDING_SEVERITIES
    # Every reason the buffer can give is a registry value, and nothing else is.
    reasons = {
        buffer.ROOT_ENDED,
        buffer.AGENT_ENDED,
        buffer.DECISION_WAIT,
        buffer.OVERFLOW,
        buffer.FLUSH,
    }
    assert reasons == set(semconv.TRACE_EVALUATION_REASONS)


def test_an_upstream_rename_of_a_guardrail_attribute_changes_only_the_registry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The guardrail attributes follow an unreleased proposal: renaming one is an edit of its
    id (and the refs to it) in the YAML; the constant the code uses keeps its name."""
    generator = _load_generator(monkeypatch)
    registry = tmp_path / "registry"
    registry.mkdir()
    old, new = "gen_ai.guardrail.verdict.type", "gen_ai.security.verdict.type"
    for path in REGISTRY_DIR.glob("*.yaml"):
        text = path.read_text(encoding="utf-8")
        (registry / path.name).write_text(text.replace(f" {old}\n", f" {new}\n"), "utf-8")
    module_text = generator.render_module(generator.load_registry(registry_dir=registry))
    renamed = ModuleType("renamed_semconv")
    exec(compile(module_text, "renamed_semconv", "exec"), renamed.__dict__)
    assert new == renamed.GEN_AI_GUARDRAIL_VERDICT_TYPE
    assert renamed.GUARDRAIL_VERDICT_BY_LEVEL == semconv.GUARDRAIL_VERDICT_BY_LEVEL
    assert renamed.is_defined(new) and not renamed.is_defined(old)
    public = {name for name in vars(semconv) if name.isupper()}
    assert public == {name for name in vars(renamed) if name.isupper()}


def _listed(note: str, opening: str) -> set[str]:
    """The backticked names of the list that follows `opening` in a note, to its `.`"""
    start = note.index(opening) + len(opening)
    return set(re.findall(r"`([a-z_]+)`", note[start : note.index(".", start)]))


def test_the_registry_lists_every_built_in_detector_key() -> None:
    from otel_safety import detectors

    note = _raw_attributes()["gen_ai.evaluation.name"]["note"]
    listed = _listed(note, "The built-in detector keys are")
    assert listed == {detector.key for detector in detectors.create()}


def test_the_registry_lists_every_risk_category_a_finding_can_carry() -> None:
    from otel_safety import detectors, guardrail

    note = _raw_attributes()["gen_ai.guardrail.security.risk.category"]["note"]
    written = {d.risk_category for d in detectors.create() if d.risk_category}
    assert _listed(note, "The values otel-safety writes are") == written | {
        guardrail.TOOL_GUARD_RISK_CATEGORY
    }


def test_the_registry_lists_every_guard_category() -> None:
    from otel_safety.guard.data import load_guard_data

    brief = _raw_attributes()["otel_safety.guard.category"]["brief"]
    listed = set(re.findall(r"[a-z_]+", brief[brief.index("(") : brief.rindex(")")]))
    assert listed == set(load_guard_data().trust)
