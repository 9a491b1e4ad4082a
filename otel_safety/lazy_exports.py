"""A package's public names imported on first use (PEP 562), not when the package is.

Why: importing any module of a package runs its `__init__` first. An application that only
configures the span processor, with detection in a worker process, would otherwise import
every detector, the guard and the monitors through their packages' `__init__`s: most of a
second of CPU and tens of MB it never uses.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(
    namespace: dict[str, Any], where: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """`__getattr__` and `__dir__` for the package whose globals are `namespace`: each name
    in `where` is taken from the module it maps to the first time it is asked for, then kept
    in the package."""
    package = namespace["__name__"]

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *where})

    return __getattr__, __dir__
