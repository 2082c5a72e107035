"""A package's exports imported from their modules on first use (PEP 562).

`reader` and `reshard` list their API in `__all__` but import it only when a name is used, so that
`import reader` stays free of torch and `lrs --help` loads none of the jobs.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(
    package: str, modules: Mapping[str, str], namespace: dict[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The `__getattr__` and `__dir__` of `package`, whose name `n` lives in module `modules[n]`.

    A name is imported once, then kept in `namespace` (the package's `globals()`), so later lookups
    no longer reach `__getattr__`.
    """

    def __getattr__(name: str) -> Any:
        module = modules.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted([*namespace, *namespace.get("__all__", ())])

    return __getattr__, __dir__
