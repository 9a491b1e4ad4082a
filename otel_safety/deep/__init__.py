"""The optional deep analysis tier: a model judges the traces the rules are unsure of.

Off by default (OTEL_SAFETY_DEEP). See docs/deep-analysis.md. `settings` resolves the
endpoint, `prompt` (with `prompt.toml`) writes a run out for the model, `reply` checks its
answer, `client` asks, `select` picks the traces, `finding` turns an answer into a
`deep_analysis` finding, and `tier` runs it all behind the engine on its own threads.

Names are imported lazily: the policies read `reply.DIMENSIONS` while the pipeline, which
the tier needs, is still being imported.
"""

from __future__ import annotations

import importlib
from typing import Any

_HOMES = {
    "COUNTERS": "names",
    "DeepTier": "tier",
    "DETECTOR": "names",
    "DeepResult": "finding",
    "DIMENSIONS": "names",
    "DeepReply": "reply",
    "DeepConfig": "settings",
    "deep_config": "settings",
    "describe": "settings",
}
__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
