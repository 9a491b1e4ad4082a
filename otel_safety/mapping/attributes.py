"""A span's attributes as a plain dict wherever the SDK keeps one.

The SDK's public mapping (`BoundedAttributes`) answers every missing key with a raised and
caught KeyError; mapping asks for dozens of keys a span does not have, and the processor asks
on the app's thread (`bench/bench_hot_path.py` times both ways). Read-only: the dict is the
span's own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["span_attributes"]


def span_attributes(span: Any) -> Mapping[str, Any]:
    """The span's attributes through the SDK's own dict when it keeps one; any other span
    (one read from OTLP, a test's stand-in) the public way."""
    raw = getattr(getattr(span, "_attributes", None), "_dict", None)
    return raw if type(raw) is dict else (span.attributes or {})
