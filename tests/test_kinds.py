"""The test-kind markers hold: a unit test that starts a process is caught and named."""

from __future__ import annotations

from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent


@pytest.mark.process
def test_a_unit_test_that_starts_a_process_fails_and_a_marked_one_passes(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(TESTS))
    pytester.makepyfile(
        test_spawning="""
        import subprocess, sys
        import pytest

        def test_unmarked():
            subprocess.run([sys.executable, "-c", "pass"], check=True)

        @pytest.mark.process
        def test_marked():
            subprocess.run([sys.executable, "-c", "pass"], check=True)

        def test_in_process():
            assert sum([1, 2]) == 3
        """
    )
    result = pytester.runpytest_subprocess("-p", "kinds")
    result.assert_outcomes(passed=3, errors=1)
    result.stdout.fnmatch_lines(
        ["*ERROR at teardown of test_unmarked*", "*marked unit: mark it @pytest.mark.process*"]
    )
    unit_only = pytester.runpytest_subprocess("-p", "kinds", "-m", "unit")
    unit_only.assert_outcomes(passed=2, errors=1, deselected=1)
