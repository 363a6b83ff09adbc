"""Trigger-time overrides of a recipe (``dag_run.conf`` and CLI ``--set``).

Why a whitelist: a DAG is generated from a recipe at parse time, so its task
structure (the ``process`` list, the project name, the schedule) is fixed.
Only values that the tasks read at run time may be overridden; changing the
op list from a trigger would silently run a DAG whose shape no longer matches
its recipe.  Everything outside ``OVERRIDABLE_KEYS`` is therefore rejected
with the key named and a did-you-mean, never dropped.

Overrides are normalized to a nested dict and deep-merged onto the YAML
*before* validation (see ``recipe.parse_recipe``), so a bad override value is
reported exactly like a bad recipe value.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import yaml

from airflow_provider_dj.engine.config.schema import (
    DJ_IGNORED_KEYS,
    OWN_TOP_LEVEL_KEYS,
    SECTION_KEYS,
    SECTIONS,
    STRING_VALUED_KEYS,
    TRACER_KEYS,
    RecipeError,
)
from airflow_provider_dj.ops.base import suggest

__all__ = [
    "OVERRIDABLE_KEYS",
    "RecipeError",
    "deep_merge",
    "normalize_overrides",
    "parse_set_args",
]

#: Every section key, overridable or not (a refused one is named as such, not as unknown).
SECTION_LEAVES = frozenset(f"{section}.{leaf}" for section in SECTIONS for leaf in SECTION_KEYS[section])


OVERRIDABLE_KEYS: frozenset[str] = frozenset(
    {
        "dataset_path",
        "export_path",
        "work_dir",
        "job_id",
        "resume",
        "np",
        "skip_op_error",
        "keep_stats_in_res_ds",
        "max_failed_ratio",
        *TRACER_KEYS,
        *SECTION_LEAVES,
    }
    - {"partition.ray_jobs_deferrable"}  # fixed when Airflow parses the file, as the schedule is
)


def _same(a: Any, b: Any) -> bool:
    """Equality that does not equate True with 1 (they mean different things here)."""
    return type(a) is type(b) and a == b


def _unknown_key_error(path: str, source: str) -> RecipeError:
    top = path.split(".", 1)[0]
    shapes_dag = path in OWN_TOP_LEVEL_KEYS or path in DJ_IGNORED_KEYS or path in SECTION_LEAVES
    if shapes_dag or (top in SECTIONS and top == path):
        return RecipeError(
            None,
            path,
            f"{path!r} cannot be overridden from {source}: it shapes the DAG or is not used "
            f"at run time; edit the recipe file instead. Overridable keys: "
            f"{', '.join(sorted(OVERRIDABLE_KEYS))}",
        )
    hint = suggest(path, OVERRIDABLE_KEYS)
    if not hint:  # "num_of_partitions" given without its section
        tails = sorted(k for k in OVERRIDABLE_KEYS if k.endswith("." + path))
        hint = f" Did you mean {tails[0]!r}?" if tails else ""
    listing = "" if hint else f" Overridable keys: {', '.join(sorted(OVERRIDABLE_KEYS))}"
    return RecipeError(None, path, f"unknown override key {path!r} in {source}.{hint}{listing}")


def _flatten(conf: Mapping, prefix: str, source: str, out: list[tuple[str, Any]]) -> None:
    for key, value in conf.items():
        if not isinstance(key, str) or not key:
            raise RecipeError(None, prefix or None, f"override keys in {source} must be non-empty strings, got {key!r}")
        path = f"{prefix}.{key}" if prefix else key
        if path in SECTIONS:
            if value is None:
                continue
            if not isinstance(value, Mapping):
                raise RecipeError(
                    None,
                    path,
                    f"{path!r} in {source} must be a mapping such as "
                    f"{{'{path}': {{'{SECTION_KEYS[path][0]}': ...}}}} or use dotted keys like "
                    f"'{path}.{SECTION_KEYS[path][0]}', got {value!r}",
                )
            _flatten(value, path, source, out)
            continue
        out.append((path, value))


def _set_path(target: dict, path: str, value: Any) -> None:
    parts = path.split(".")
    node = target
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value


def _nest(leaves: dict[str, Any]) -> dict:
    nested: dict = {}
    for path, value in leaves.items():
        _set_path(nested, path, value)
    return nested


def normalize_overrides(conf: Mapping | None, *, source: str = "dag_run.conf") -> dict:
    """Validate override keys and return them as a nested dict.

    Accepts nested (``{"partition": {"num_of_partitions": 4}}``), dotted
    (``{"partition.num_of_partitions": 4}``) and mixed spellings.  A ``None``
    value means "not overridden" and is dropped (Airflow's trigger form sends
    nulls for fields left empty).  Values are not type-checked here: the
    recipe parser checks them after merging, with the note "(from <source>)".
    """
    if conf is None:
        return {}
    if not isinstance(conf, Mapping):
        raise RecipeError(None, None, f"{source} must be a mapping of override keys, got {conf!r}")
    flat: list[tuple[str, Any]] = []
    _flatten(conf, "", source, flat)
    leaves: dict[str, Any] = {}
    for path, value in flat:
        if path not in OVERRIDABLE_KEYS:
            raise _unknown_key_error(path, source)
        if value is None:
            continue
        if path in leaves and not _same(leaves[path], value):
            raise RecipeError(
                None,
                path,
                f"{source} sets {path!r} twice with different values ({leaves[path]!r} and "
                f"{value!r}), e.g. once nested and once dotted; give it once",
            )
        leaves[path] = copy.deepcopy(value)
    return _nest(leaves)


def _parse_value(key: str, raw: str) -> Any:
    if key in STRING_VALUED_KEYS:
        return raw
    try:
        return yaml.safe_load(raw)
    except yaml.YAMLError:
        return raw  # e.g. "*.jsonl" (a YAML alias): the text itself was meant


def parse_set_args(items: list[str] | tuple[str, ...] | None) -> dict:
    """Turn CLI ``--set KEY=VALUE`` items into a nested override dict.

    Values are YAML-parsed so ``4`` is an int, ``true`` a bool and ``[a, b]``
    a list, except for path and id keys (``STRING_VALUED_KEYS``), whose text is
    kept verbatim.  Keys are not checked here; ``normalize_overrides`` does
    that when the result is applied, so both entry points report alike.
    """
    leaves: dict[str, Any] = {}
    for item in items or ():
        if not isinstance(item, str) or "=" not in item:
            raise RecipeError(
                None,
                None,
                f"--set {item!r}: expected KEY=VALUE, e.g. --set partition.num_of_partitions=4 "
                f"or --set dataset_path=/data/in.jsonl",
            )
        key, raw = item.split("=", 1)
        key = key.strip()
        if not key or any(not part for part in key.split(".")):
            raise RecipeError(
                None,
                key or None,
                f"--set {item!r}: the key must be a dotted name such as partition.num_of_partitions",
            )
        value = _parse_value(key, raw.strip())
        pairs = (
            [(f"{key}.{k}", v) for k, v in value.items()]
            if key in SECTIONS and isinstance(value, dict)
            else [(key, value)]
        )
        for path, val in pairs:
            if path in leaves and not _same(leaves[path], val):
                raise RecipeError(
                    None,
                    path,
                    f"--set gives {path!r} twice with different values ({leaves[path]!r} and {val!r}); give it once",
                )
            leaves[path] = val
    return _nest(leaves)


def deep_merge(base: Mapping, override: Mapping) -> dict:
    """Merge ``override`` onto ``base`` recursively, without mutating either.

    Mappings merge key by key; any other value (lists included) replaces the
    base value whole, which is what an override of ``checkpoint.op_names``
    means.
    """
    result = copy.deepcopy(dict(base))
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(result.get(key), Mapping):
            result[key] = deep_merge(result[key], value)
        else:
            result[key] = copy.deepcopy(value)
    return result
