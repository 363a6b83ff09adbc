"""The recipe parser's value checks and its sections (partition, checkpoint, dedup_history, storage).

Split from recipe.py, which keeps the whole-recipe parse (top-level keys, ops, paths): a
``ValueParser`` words every error with the file, the dotted key and where an override came from;
``SectionParser`` turns each section's mapping into its frozen config.
"""

from __future__ import annotations

from typing import Any

from airflow_provider_dj.engine.config import schema as S
from airflow_provider_dj.engine.config.schema import (
    CheckpointConfig,
    DedupHistoryConfig,
    IntermediateStorageConfig,
    OpSpec,
    PartitionConfig,
    RecipeError,
    ReviewConfig,
)
from airflow_provider_dj.ops.base import suggest


def get_or_default(d: dict, key: str, default: Any = None) -> Any:
    """``d[key]``, with an explicit null meaning "use the default" (Data-Juicer writes ``size: null``)."""
    value = d.get(key)
    return default if value is None else value


def is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


class ValueParser:
    """One parse: knows the file and which keys came from overrides, to word errors."""

    def __init__(self, file: str | None, base_dir: str, overridden: frozenset[str], source: str) -> None:
        self.file, self.base_dir, self.overridden, self.source = file, base_dir, overridden, source
        #: parse time: templated key paths kept as written (their value checks wait for the task)
        self.templated: dict[str, str] = {}
        #: run time: key paths whose value was rendered from a template (named in errors)
        self.rendered: dict[str, str] = {}

    def err(self, key: str | None, message: str, *related: str) -> RecipeError:
        keys = [k for k in (key, *related) if k]
        hit = any(
            k == o or k.startswith((o + ".", o + "[")) or o.startswith(k + ".") for k in keys for o in self.overridden
        )
        template = next((t for p, t in self.rendered.items() if key and (p == key or p.startswith(key + "["))), None)
        note = f" (rendered from the template {template!r})" if template else ""
        return RecipeError(self.file, key, message + (f" (from {self.source})" if hit else "") + note)

    # -- scalar checks ----------------------------------------------------
    def bool_(self, value: Any, key: str) -> bool:
        if not isinstance(value, bool):
            raise self.err(key, f"must be true or false, got {value!r}")
        return value

    def int_(self, value: Any, key: str, minimum: int = 1, *, none: bool = False, auto: bool = False) -> int | None:
        if (value is None and none) or (auto and value == "auto"):
            return None
        if not is_int(value) or value < minimum:
            alts = (' or "auto"' if auto else "") + (" or null" if none else "")
            raise self.err(key, f"must be an integer >= {minimum}{alts}, got {value!r}")
        return value

    def ratio(self, value: Any, key: str) -> float | None:
        """A fraction in [0, 1] or null (the failure-rate guard's limit)."""
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
            raise self.err(
                key,
                f"must be a number from 0 to 1 (the fraction of an op's input rows that may fail "
                f"before the job stops; 1 turns the guard off), got {value!r}",
            )
        return float(value)

    def str_(self, value: Any, key: str, *, none: bool = False) -> str | None:
        if value is None and none:
            return None
        if not isinstance(value, str) or not value.strip():
            raise self.err(key, f"must be a non-empty string (quote it in YAML), got {value!r}")
        return value.strip()

    def enum(self, value: Any, key: str, allowed: tuple[str, ...]) -> str:
        if value not in allowed:
            hint = suggest(value, allowed) if isinstance(value, str) else ""
            raise self.err(key, f"must be one of {', '.join(allowed)}, got {value!r}.{hint}")
        return value

    def str_list(self, value: Any, key: str) -> tuple[str, ...]:
        if value is None:
            return ()
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) and v for v in value):
            raise self.err(key, f"must be a list of non-empty strings, got {value!r}")
        return tuple(value)

    def section(self, data: dict, name: str) -> dict:
        raw = get_or_default(data, name)
        if raw is None:
            return {}
        if not isinstance(raw, dict):
            raise self.err(name, f"must be a mapping of {', '.join(S.SECTION_KEYS[name][:4])}, ...; got {raw!r}")
        for k in raw:
            if k not in S.SECTION_KEYS[name]:
                raise self.err(
                    f"{name}.{k}",
                    f"unknown key {k!r} in {name}.{suggest(str(k), S.SECTION_KEYS[name])} "
                    f"Allowed: {', '.join(S.SECTION_KEYS[name])}",
                )
        return raw


class SectionParser(ValueParser):
    """The recipe's sections, each to its frozen config."""

    # -- sections ---------------------------------------------------------
    def partition(self, data: dict) -> PartitionConfig:
        raw = dict(self.section(data, "partition"))
        legacy = get_or_default(data, "partition_size")
        if legacy is not None:
            legacy = self.int_(legacy, "partition_size")
            if get_or_default(raw, "size") is not None and raw["size"] != legacy:
                raise self.err(
                    "partition_size",
                    f"deprecated partition_size={legacy!r} conflicts with "
                    f"partition.size={raw['size']!r}; keep only partition.size",
                    "partition.size",
                )
            raw.setdefault("size", legacy)
        mode = self.enum(
            get_or_default(raw, "mode", S.default_of(PartitionConfig, "mode")), "partition.mode", S.PARTITION_MODES
        )
        count = self.int_(get_or_default(raw, "num_of_partitions"), "partition.num_of_partitions", none=True, auto=True)
        size = self.int_(get_or_default(raw, "size"), "partition.size", none=True)
        if mode == "manual" and count is not None and size is not None:
            given_count = "partition.num_of_partitions" in self.overridden
            given_size = "partition.size" in self.overridden
            if given_count != given_size:  # an override of one replaces the recipe's other
                count, size = (count, None) if given_count else (None, size)
            else:
                raise self.err(
                    "partition",
                    f"manual mode takes either num_of_partitions ({count}) or size ({size}), not both; remove one",
                )
        if mode == "manual" and count is None and size is None:
            count = S.DEFAULT_MANUAL_PARTITIONS
        target = self.int_(
            get_or_default(raw, "target_size_mb", S.default_of(PartitionConfig, "target_size_mb")),
            "partition.target_size_mb",
        )
        max_mb = self.int_(get_or_default(raw, "max_size_mb"), "partition.max_size_mb", none=True)
        if max_mb is not None and max_mb < target:
            raise self.err(
                "partition.max_size_mb",
                f"{max_mb} is below target_size_mb ({target}); raise it or lower target_size_mb",
                "partition.target_size_mb",
            )
        # For "opt_" keys null is a value of its own (gpu_probe_sample_seed: null = a fresh sample each run).
        extra = {
            k: self.extra(k, raw[k] if k in raw and kind.startswith("opt_") else get_or_default(raw, k, default), kind)
            for k, (default, kind) in S.PARTITION_EXTRA.items()
        }
        return PartitionConfig(
            mode=mode,
            num_of_partitions=count,
            size=size,
            target_size_mb=target,
            max_size_mb=max_mb,
            max_concurrent_partitions=self.int_(
                get_or_default(raw, "max_concurrent_partitions"),
                "partition.max_concurrent_partitions",
                none=True,
                auto=True,
            ),
            extra=extra,
        )

    def extra(self, name: str, value: Any, kind: str) -> Any:
        key = f"partition.{name}"
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if kind == "bool":
            return self.bool_(value, key)
        if kind == "align":
            return self.enum(value, key, S.PARTITION_ALIGNS)
        if kind == "auto_or_pos_int":
            return "auto" if value == "auto" else self.int_(value, key, auto=True)
        if kind in ("pos_int", "nonneg_int"):
            return self.int_(value, key, 1 if kind == "pos_int" else 0)
        if kind == "opt_bool" and value is not None:
            return self.bool_(value, key)
        if kind == "opt_int" and not (value is None or is_int(value)):
            raise self.err(key, f"must be an integer or null, got {value!r}")
        if kind == "opt_pos_number" and not (value is None or (number and value > 0)):
            raise self.err(key, f"must be a positive number of seconds or null, got {value!r}")
        if kind == "opt_str" and not (value is None or (isinstance(value, str) and value.strip())):
            raise self.err(key, f"must be a non-empty string (an Airflow pool name) or null, got {value!r}")
        if kind == "ratio" and not (number and 0 < value <= 1):
            raise self.err(key, f"must be a number in (0, 1], got {value!r}")
        return value

    def checkpoint(self, raw: dict, names: list[str]) -> CheckpointConfig:
        enabled = self.bool_(
            get_or_default(raw, "enabled", S.default_of(CheckpointConfig, "enabled")), "checkpoint.enabled"
        )
        strategy = self.enum(
            get_or_default(raw, "strategy", S.default_of(CheckpointConfig, "strategy")),
            "checkpoint.strategy",
            S.CHECKPOINT_STRATEGIES,
        )
        n_ops = self.int_(get_or_default(raw, "n_ops", S.default_of(CheckpointConfig, "n_ops")), "checkpoint.n_ops")
        refs = self.op_refs(get_or_default(raw, "op_names"), "checkpoint.op_names", names)
        if not enabled or strategy == "disabled":
            return CheckpointConfig(False, "disabled", n_ops, refs)
        if strategy == "manual" and not refs:
            raise self.err(
                "checkpoint.op_names",
                f"strategy manual needs op_names: the ops after which to "
                f"checkpoint, from process: {', '.join(dict.fromkeys(names))}",
                "checkpoint.strategy",
            )
        return CheckpointConfig(True, strategy, n_ops, refs)

    def dedup_history(self, raw: dict, process: tuple[OpSpec, ...]) -> DedupHistoryConfig | None:
        """``dedup_history:`` (docs/nightly.md#deduplication-against-history): checked here, before any work."""
        if not raw or raw.get("path") is None:
            if raw and raw.get("ops"):
                raise self.err(
                    "dedup_history.path", "is required with dedup_history.ops: the history index's directory"
                )
            return None
        path = self.str_(raw["path"], "dedup_history.path")
        if "://" in path:
            raise self.err(
                "dedup_history.path",
                f"{path!r}: the history index is local-only for now (its commit takes a file lock); use a local "
                f"path on a file system every export task sees",
            )
        ops = self.str_list(raw.get("ops"), "dedup_history.ops")
        if not ops:
            raise self.err(
                "dedup_history.ops",
                f"name the deduplicators that check history, from: {', '.join(S.DEDUP_HISTORY_OPS)}",
            )
        names = [op.name for op in process]
        for j, name in enumerate(ops):
            if name not in S.DEDUP_HISTORY_OPS:
                raise self.err(
                    f"dedup_history.ops[{j}]",
                    f"{name!r} cannot check history: supported are {', '.join(S.DEDUP_HISTORY_OPS)} "
                    f"(their keys are looked up by equality)",
                )
            if names.count(name) != 1:
                raise self.err(
                    f"dedup_history.ops[{j}]",
                    f"{name!r} appears {names.count(name)} times in process; it must appear exactly once to "
                    f"check history",
                )
        memory_mb = self.int_(
            raw.get("memory_mb", S.default_of(DedupHistoryConfig, "memory_mb")), "dedup_history.memory_mb", minimum=8
        )
        return DedupHistoryConfig(self.path(path), tuple(dict.fromkeys(ops)), memory_mb)

    def storage(self, raw: dict) -> IntermediateStorageConfig:
        fmt = self.enum(
            get_or_default(raw, "format", S.default_of(IntermediateStorageConfig, "format")),
            "intermediate_storage.format",
            S.STORAGE_FORMATS,
        )
        comp = get_or_default(raw, "compression", S.DEFAULT_COMPRESSION[fmt])
        if comp is False:  # YAML 1.1 reads a bare `no`/`off` as false
            comp = "none"
        allowed = S.STORAGE_COMPRESSIONS[fmt]
        if comp not in allowed:
            raise self.err(
                "intermediate_storage.compression",
                f"{comp!r} is not available for format {fmt}; use "
                f"one of {', '.join(allowed)}.{suggest(str(comp), allowed)}",
                "intermediate_storage.format",
            )
        return IntermediateStorageConfig(
            format=fmt,
            compression=comp,
            preserve_intermediate_data=self.bool_(
                get_or_default(
                    raw,
                    "preserve_intermediate_data",
                    S.default_of(IntermediateStorageConfig, "preserve_intermediate_data"),
                ),
                "intermediate_storage.preserve_intermediate_data",
            ),
            retention_policy=self.enum(
                get_or_default(raw, "retention_policy", S.default_of(IntermediateStorageConfig, "retention_policy")),
                "intermediate_storage.retention_policy",
                S.RETENTION_POLICIES,
            ),
            reuse_across_jobs=self.bool_(
                get_or_default(raw, "reuse_across_jobs", S.default_of(IntermediateStorageConfig, "reuse_across_jobs")),
                "intermediate_storage.reuse_across_jobs",
            ),
        )

    def review(self, raw: dict) -> ReviewConfig | None:
        """``review:`` (docs/review_gate.md): None without the section; at least one bound is required."""
        if not raw:
            return None
        bounds = {
            k: self.ratio_or_none(raw.get(k), f"review.{k}") for k in ("max_removed_fraction", "max_removed_change")
        }
        if all(v is None for v in bounds.values()):
            raise self.err(
                "review",
                "name at least one bound: max_removed_fraction (0-1: the share of an op's input it may remove) "
                "or max_removed_change (0-1: how far that share may move from the previous successful job)",
            )
        timeout = raw.get("timeout_s")
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0):
            raise self.err(
                "review.timeout_s", f"must be a number of seconds > 0 or null (wait until answered), got {timeout!r}"
            )
        return ReviewConfig(
            **bounds,
            timeout_s=float(timeout) if timeout is not None else None,
            on_timeout=self.enum(
                get_or_default(raw, "on_timeout", S.default_of(ReviewConfig, "on_timeout")),
                "review.on_timeout",
                S.REVIEW_ON_TIMEOUT,
            ),
            sample_rows=self.int_(
                get_or_default(raw, "sample_rows", S.default_of(ReviewConfig, "sample_rows")),
                "review.sample_rows",
                minimum=0,
            ),
        )

    def ratio_or_none(self, value, key: str) -> float | None:
        """A fraction from 0 to 1, or None when absent."""
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
            raise self.err(key, f"must be a number from 0 to 1 (a fraction of an op's input rows), got {value!r}")
        return float(value)
