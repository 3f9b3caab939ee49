"""PEP 562 lazy package exports, shared by backbone and the application packages.

    __getattr__, __dir__, __all__ = lazy_exports(__name__, {"module": ("Name", ...)}, globals())

A name is imported from its module on first access and then cached in the package namespace, so
`import anomaly` (and `frozenvit --help`) does not pay for torch, faiss or statsforecast.

Some exported functions share their module's name (`control.evaluate`, `forecasting.backtest`).
Importing such a submodule makes the import system set the package attribute to the module; the
package's class is swapped for one that keeps the function there instead, as an eager
`from .evaluate import evaluate` in `__init__` would.
"""
from __future__ import annotations

import sys
import types
from importlib import import_module
from typing import Any, Callable


def lazy_exports(package: str, api: dict[str, tuple[str, ...]], namespace: dict[str, Any]
                 ) -> tuple[Callable[[str], Any], Callable[[], list[str]], list[str]]:
    where = {name: mod for mod, names in api.items() for name in names}
    public = sorted(where)
    shadowed = {name for name, mod in where.items() if name == mod}

    def __getattr__(name: str) -> Any:
        if name in where:
            value = getattr(import_module(f".{where[name]}", package), name)
            namespace[name] = value
            return value
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(public))

    if shadowed:
        class _Package(types.ModuleType):
            def __setattr__(self, name: str, value: Any) -> None:
                if name in shadowed and isinstance(value, types.ModuleType):
                    value = getattr(value, name)          # the submodule arrived: export its function
                super().__setattr__(name, value)

        sys.modules[package].__class__ = _Package
    return __getattr__, __dir__, public
