"""What importing the package loads: each module imports on its own (no import cycle hidden
by the order in which the package used to load everything), and an app that judges in a
worker process loads no detector, guard or monitor."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

_EACH_MODULE_ALONE = """
import importlib, json, pkgutil, sys
import otel_safety
names = [m.name for m in pkgutil.walk_packages(otel_safety.__path__, "otel_safety.")]
failed = {}
for name in names:
    for loaded in [m for m in sys.modules if m == "otel_safety" or m.startswith("otel_safety.")]:
        del sys.modules[loaded]
    try:
        importlib.import_module(name)
    except Exception as exc:
        failed[name] = repr(exc)
print(json.dumps({"modules": len(names), "failed": failed}))
"""


@pytest.mark.process
def test_every_module_imports_on_its_own():
    done = subprocess.run(
        [sys.executable, "-c", _EACH_MODULE_ALONE],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["modules"] > 200
    assert result["failed"] == {}


# Modules that only judging needs: the detectors, the monitors and the guard's rules.
_JUDGING_ONLY = (
    "otel_safety.detectors.",
    "otel_safety.behavior.",
    "otel_safety.guard.",
    "otel_safety.judges",
)
_ALLOWED = {
    "otel_safety.detectors.base",
    "otel_safety.detectors.registry",
    "otel_safety.detectors.severity",
    "otel_safety.analysis.patterns.datafiles",
    "otel_safety.analysis.patterns.regex_syntax",
    "otel_safety.behavior.modes",
    "otel_safety.guard.signing",
}


@pytest.mark.process
def test_an_app_judging_in_a_worker_process_imports_no_detector(tmp_path):
    script = textwrap.dedent(
        f"""
        import json, sys
        import otel_safety
        provider = otel_safety.configure(
            db_path={str(tmp_path / "app.duckdb")!r}, detection="process",
            detectors=["injection", "sandbagging"], monitor_modes={{"sandbagging": "passive"}},
        )
        loaded = sorted(m for m in sys.modules if m.startswith("otel_safety"))
        provider.shutdown()
        print(json.dumps(loaded))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    loaded = json.loads(done.stdout.strip().splitlines()[-1])
    judging = [m for m in loaded if m.startswith(_JUDGING_ONLY) and m not in _ALLOWED]
    assert "otel_safety.bootstrap" in loaded  # the script did configure
    assert judging == []
