"""How to install one of the package's extras, said the way this install was made.

"pip install 'otel-safety[dashboard]'" is wrong advice in a checkout installed with
`pip install -e .` (the README's way): there it is "pip install -e '/path/to/checkout[dashboard]'".
pip records which it was in the distribution's `direct_url.json` (PEP 610).
"""

from __future__ import annotations

import functools
import json
from importlib import metadata
from urllib.parse import unquote, urlparse

__all__ = ["install_hint"]

DISTRIBUTION = "otel-safety"


def install_hint(extra: str) -> str:
    """The pip command that adds `extra` to this install."""
    checkout = _editable_checkout()
    if checkout:
        return f"pip install -e '{checkout}[{extra}]'"
    return f"pip install '{DISTRIBUTION}[{extra}]'"


@functools.cache
def _editable_checkout() -> str | None:
    """The folder this package was installed from with `pip install -e`, if it was."""
    try:
        text = metadata.distribution(DISTRIBUTION).read_text("direct_url.json")
        record = json.loads(text) if text else {}
    except (metadata.PackageNotFoundError, ValueError):
        return None
    url = record.get("url") if isinstance(record, dict) else None
    editable = isinstance(record.get("dir_info"), dict) and record["dir_info"].get("editable")
    if not editable or not isinstance(url, str) or not url.startswith("file://"):
        return None
    return unquote(urlparse(url).path) or None
