"""A user's own detectors judge wherever ours do: in the detection process an app starts,
in a command's, and by the key a command is given; or they say why they cannot."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import uuid

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_safety import create_processor
from otel_safety import semconv as sc
from otel_safety.detectors import Assessment, Detector, check, known, register, registry
from otel_safety.detectors.registry import PLUGINS_ENV
from otel_safety.model import Evidence

PLUGIN = """
from otel_safety.detectors import Assessment, Detector, register
from otel_safety.model import Evidence


@register
class ExternalEmail(Detector):
    key = "{key}"
    default_threshold = 0.5
    description = "An e-mail went to an address outside acme.example."

    def judge(self, trajectory, analysis):
        found = []
        for call in trajectory.tool_calls:
            to = str(call.arguments.get("to", ""))
            outside = call.name == "send_email" and not to.endswith("@acme.example")
            evidence = [Evidence(text=f"mail to {{to}}", span_id=call.span_id)]
            found.append(Assessment(1.0 if outside else 0.0, evidence, f"mail to {{to}}"))
        return found
"""


@pytest.fixture
def plugin(tmp_path):
    """A plug-in module, in a folder of its own (as beside an app's script), registering a
    detector under a fresh key; the registry and import path are restored afterwards."""
    key = f"external_email_{uuid.uuid4().hex[:8]}"
    module = f"acme_rules_{key[-8:]}"
    folder = tmp_path / "app"
    folder.mkdir()
    (folder / f"{module}.py").write_text(PLUGIN.format(key=key))
    yield key, module, folder
    registry._REGISTRY.pop(key, None)
    registry._loaded.discard(module)
    sys.modules.pop(module, None)
    if str(folder) in sys.path:
        sys.path.remove(str(folder))


def mail(provider: TracerProvider, to: str) -> None:
    tracer = provider.get_tracer("tests")
    with (
        tracer.start_as_current_span(
            "invoke_agent mailer",
            attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "mailer"},
        ),
        tracer.start_as_current_span(
            "execute_tool send_email",
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "send_email",
                "gen_ai.tool.call.arguments": json.dumps({"to": to, "body": "hi"}),
            },
        ),
    ):
        pass


def fired_on_mail(exporter: InMemorySpanExporter) -> dict[str, tuple[str, ...]]:
    return {
        json.loads(span.attributes["gen_ai.tool.call.arguments"])["to"]: tuple(
            span.attributes.get(sc.OTEL_SAFETY_DETECTORS_FIRED, ())
        )
        for span in exporter.get_finished_spans()
        if "gen_ai.tool.call.arguments" in span.attributes
    }


def judged_by_an_app(tmp_path, key: str) -> tuple[dict[str, tuple[str, ...]], bool]:
    exporter = InMemorySpanExporter()
    processor = create_processor(
        str(tmp_path / "store.duckdb"),
        exporters=[exporter],
        detection="process",
        detectors=[key, "tool_guard"],
    )
    provider = TracerProvider()
    provider.add_span_processor(processor)
    try:
        mail(provider, "bob@rival.example")
        mail(provider, "alice@acme.example")
        assert provider.force_flush(120_000)
        return fired_on_mail(exporter), processor.engine.pipeline.in_process
    finally:
        provider.shutdown()


@pytest.mark.process
def test_a_detector_the_app_imported_judges_in_its_detection_process(tmp_path, plugin):
    key, module, folder = plugin
    sys.path.insert(0, str(folder))  # the app's script folder: the child does not search it
    __import__(module)
    fired, in_process = judged_by_an_app(tmp_path, key)
    assert not in_process  # judged in the child, which imported the module too
    assert key in fired["bob@rival.example"]
    assert key not in fired["alice@acme.example"]


@pytest.mark.process
def test_a_detector_the_apps_main_defines_judges_in_the_app_and_says_why(tmp_path, caplog):
    key = f"main_rule_{uuid.uuid4().hex[:8]}"

    class MainRule(Detector):
        default_threshold = 0.5

        def judge(self, trajectory, analysis):
            return [
                Assessment(1.0, [Evidence(text="mail", span_id=call.span_id)], "mail")
                for call in trajectory.tool_calls
            ]

    MainRule.key = key
    MainRule.__module__ = "__main__"  # as a class written in the app's script is
    register(MainRule)
    try:
        with caplog.at_level(logging.WARNING, logger="otel_safety"):
            fired, in_process = judged_by_an_app(tmp_path, key)
    finally:
        registry._REGISTRY.pop(key, None)
    assert in_process
    assert key in fired["bob@rival.example"]
    said = " ".join(record.getMessage() for record in caplog.records)
    assert f"{key} are defined in the application's __main__" in said
    assert "unknown detector" not in said


@pytest.mark.process
def test_a_command_judges_with_the_plugins_its_variable_names(tmp_path, plugin):
    key, module, folder = plugin
    env = {**os.environ, PLUGINS_ENV: module, "PYTHONPATH": str(folder)}
    command = [sys.executable, "-m", "otel_safety.cli", "detectors"]
    listed = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0, listed.stderr
    assert key in listed.stdout
    env[PLUGINS_ENV] = "acme_rules_missing"
    missing = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert missing.returncode == 1
    assert "plug-in module 'acme_rules_missing'" in missing.stderr
    assert "was not found: is it installed, or its folder on PYTHONPATH?" in missing.stderr
    (folder / "acme_broken.py").write_text("import os\n\nraise RuntimeError('no config')\n")
    env[PLUGINS_ENV] = "acme_broken"
    broken = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert broken.returncode == 1
    assert "failed to import: RuntimeError: no config at " in broken.stderr
    assert "acme_broken.py:3" in broken.stderr


def test_every_detector_but_those_named_with_a_dash():
    wanted = check(["-over_refusal", "-deception"])
    assert set(wanted) == set(known()) - {"over_refusal", "deception"}
    with pytest.raises(ValueError, match="not both"):
        check(["injection", "-over_refusal"])
    with pytest.raises(ValueError, match=r"unknown detector.*over_refusl"):
        check(["-over_refusl"])


def test_two_plugins_on_one_key_are_refused(plugin):
    key, module, folder = plugin
    sys.path.insert(0, str(folder))
    __import__(module)

    class Twin(Detector):
        default_threshold = 0.5

    Twin.key = key
    with pytest.raises(ValueError, match=f"two detectors registered the key '{key}'"):
        register(Twin)


def test_a_class_that_cannot_judge_by_key_is_refused_when_registered():
    class NoThreshold(Detector):
        key = "no_threshold"

    with pytest.raises(ValueError, match="default_threshold"):
        register(NoThreshold)

    class Shadow(Detector):
        key = "injection"
        default_threshold = 0.5

    with pytest.raises(ValueError, match="key 'injection' of a built-in"):
        register(Shadow)
    assert registry.detector_class("injection").__module__ == "otel_safety.detectors.injection"


def test_a_detector_object_given_for_a_key_says_what_to_do(tmp_path):
    from otel_safety.config import ConfigError

    class Instance(Detector):
        key = "instance"
        default_threshold = 0.5

    with pytest.raises(ConfigError, match=r"detector keys, not objects \(Instance\).*@register"):
        create_processor(str(tmp_path / "s.duckdb"), detectors=[Instance()])
    assert not (tmp_path / "s.duckdb").exists()


@pytest.mark.process
def test_an_installed_packages_entry_point_registers_its_detectors_or_stops_the_command(tmp_path):
    """A package's `otel_safety.detectors` entry point is found as pip installs it (a
    dist-info folder on the path); one that fails to import stops the command, as a module
    OTEL_SAFETY_PLUGINS names does, where it was logged and the command went on without it."""
    key = f"acme_entry_{uuid.uuid4().hex[:8]}"
    site = tmp_path / "site"
    (site / "acme_entry-0.1.dist-info").mkdir(parents=True)
    (site / "acme_entry-0.1.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: acme-entry\nVersion: 0.1\n"
    )
    (site / "acme_entry-0.1.dist-info" / "entry_points.txt").write_text(
        "[otel_safety.detectors]\nacme = acme_entry_rules\n"
    )
    (site / "acme_entry_rules.py").write_text(PLUGIN.format(key=key))
    env = {**os.environ, "PYTHONPATH": str(site)}
    env.pop(PLUGINS_ENV, None)
    command = [sys.executable, "-m", "otel_safety.cli", "detectors", "--check"]
    checked = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert checked.returncode == 0, checked.stderr
    assert key in checked.stdout
    (site / "acme_entry_rules.py").write_text("raise ImportError('needs acme-sdk')\n")
    broken = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert broken.returncode == 1
    assert "the otel_safety.detectors entry point 'acme'" in broken.stderr
    assert "failed to import: ImportError: needs acme-sdk" in broken.stderr
