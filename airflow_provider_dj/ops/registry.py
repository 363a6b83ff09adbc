"""Name -> op class registry.

Ops register themselves with ``@register``; ``load_builtin_ops`` imports the
modules that hold them so the registry is complete whenever it is consulted.
"""

from __future__ import annotations

import importlib
from typing import Any

from airflow_provider_dj.core.errors import DJError
from airflow_provider_dj.ops.base import Op

_REGISTRY: dict[str, type[Op]] = {}
_BUILTIN_MODULES = (
    "airflow_provider_dj.ops.mappers.basic",
    "airflow_provider_dj.ops.filters.basic",
    "airflow_provider_dj.ops.dedup.exact",
    "airflow_provider_dj.ops.mappers.text",
    "airflow_provider_dj.ops.mappers.web",
    "airflow_provider_dj.ops.filters.text",
    "airflow_provider_dj.ops.filters.fields",
    "airflow_provider_dj.ops.dedup.near",
    "airflow_provider_dj.ops.filters.words",
    "airflow_provider_dj.ops.mappers.latex",
    "airflow_provider_dj.ops.mappers.words",
    # fastText / KenLM / SentencePiece are imported on the op's first use, never at registration.
    "airflow_provider_dj.ops.filters.language_id",
    "airflow_provider_dj.ops.filters.perplexity",
    # Imports nothing heavy: torch and the model load on the op's first batch.
    "airflow_provider_dj.ops.mappers.embedding",
    "airflow_provider_dj.ops.llm.api_mapper",
    # Pillow is imported on the first image read (ops/kernels/images.py), never at registration.
    "airflow_provider_dj.ops.filters.image",
    "airflow_provider_dj.ops.dedup.image",
    "airflow_provider_dj.ops.mappers.image_blur",
)
_loaded = False


class UnknownOpError(DJError, KeyError):
    def __init__(self, name: str, message: str) -> None:
        super().__init__(message)
        self.name = name
        self.message = message

    def __str__(self) -> str:
        return self.message


def register(cls: type[Op]) -> type[Op]:
    if not cls.name:
        raise ValueError(f"{cls.__qualname__} has no name")
    if cls.name in _REGISTRY and _REGISTRY[cls.name] is not cls:
        raise ValueError(f"op {cls.name!r} registered twice")
    _REGISTRY[cls.name] = cls
    return cls


def load_builtin_ops() -> None:
    global _loaded
    if _loaded:
        return
    for mod in _BUILTIN_MODULES:
        importlib.import_module(mod)
    _loaded = True


def op_names() -> list[str]:
    load_builtin_ops()
    return sorted(_REGISTRY)


def get_op_class(name: str) -> type[Op]:
    load_builtin_ops()
    cls = _REGISTRY.get(name)
    if cls is not None:
        return cls
    # Not native: maybe a Data-Juicer op, run through the adapter when
    # data_juicer is installed (checked with find_spec, never imported here).
    from airflow_provider_dj.ops.dj_compat import adapter as dj_adapter

    adapted = dj_adapter.adapted_op_class(name)
    if adapted is not None:
        return adapted
    raise UnknownOpError(name, dj_adapter.unknown_op_message(name, _REGISTRY))


def create_op(name: str, args: dict[str, Any] | None, text_key: str = "text") -> Op:
    """Instantiate an op; ``args`` as written in the recipe (already validated)."""
    cls = get_op_class(name)
    kwargs = dict(args or {})
    kwargs.setdefault("text_key", text_key)
    return cls(**kwargs)
