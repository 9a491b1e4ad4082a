"""extras.install_hint: the advice follows how this package was installed (PEP 610)."""

from __future__ import annotations

import json
from importlib import metadata
from pathlib import Path

from otel_safety import extras


def test_a_checkout_installed_with_e_is_told_to_install_from_that_checkout():
    record = metadata.distribution(extras.DISTRIBUTION).read_text("direct_url.json") or "{}"
    editable = json.loads(record).get("dir_info", {}).get("editable")
    hint = extras.install_hint("dashboard")
    if editable:  # the README's `make` targets install this way
        root = Path(__file__).resolve().parents[1]
        assert hint == f"pip install -e '{root}[dashboard]'"
    else:
        assert hint == "pip install 'otel-safety[dashboard]'"


def test_an_install_from_an_index_is_told_the_package_and_extra(monkeypatch):
    monkeypatch.setattr(extras, "_editable_checkout", lambda: None)
    assert extras.install_hint("lake") == "pip install 'otel-safety[lake]'"
