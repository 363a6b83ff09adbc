"""Names a package hands out from its submodules, imported on first use.

A package's ``__init__`` that imported its public names eagerly would import the whole package for
any one submodule (``import airflow_provider_dj.engine.jobdir.layout`` runs ``engine/__init__``).
"""

from __future__ import annotations

import importlib
from typing import Any, Callable


def lazy_exports(package: str, exports: dict[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` resolving each name of ``exports`` (name -> module) on first use."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module), name)

    return __getattr__
