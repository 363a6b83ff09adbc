"""The recipe data model: ``RecipeError`` and the frozen dataclasses a validated recipe is made of.

Import from ``airflow_provider_dj.engine.config.recipe``, which re-exports all of it;
the split only keeps the validating parser (recipe.py) short.  The key tables (which keys exist,
enums, defaults) live in ``recipe_keys.py``; they are re-exported here, so ``schema.X`` still works.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

from airflow_provider_dj.core.errors import RefusedError

# The key tables, re-exported: recipe.py, section_parsers.py, gen_docs and the tests read them as schema.X.
from airflow_provider_dj.engine.config.recipe_keys import *  # noqa: F403
from airflow_provider_dj.engine.config.recipe_keys import (
    DEFAULT_DEDUP_HISTORY_MEMORY_MB,
    DEFAULT_MEDIA_KEYS,
    DEFAULT_REVIEW_SAMPLE_ROWS,
    PARTITION_FIELDS,
    REVIEW_FIELDS,
    STORAGE_FIELDS,
)


class RecipeError(RefusedError, ValueError):
    """A recipe (or an override of it) is invalid.

    ``file`` is the recipe file (None when parsing a dict), ``key`` the dotted
    key path of the offending value (``process[2].words_num_filter.min_num``),
    ``message`` what is wrong and what to change.  ``str(e)`` joins the parts
    that are present with ``": "`` so the UI and the CLI show one line that
    points at the exact spot.
    """

    def __init__(self, file: str | None, key: str | None, message: str) -> None:
        self.file = file
        self.key = key
        self.message = message
        super().__init__(self._render())

    def _render(self) -> str:
        return ": ".join(p for p in (self.file, self.key, self.message) if p is not None)

    def __str__(self) -> str:
        return self._render()

    def __reduce__(self):  # errors cross process boundaries (Ray, Airflow task runner)
        return (type(self), (self.file, self.key, self.message))

    def with_file(self, file: str | None) -> RecipeError:
        """A copy naming ``file`` (used when an override error surfaces while loading a file)."""
        return RecipeError(file if self.file is None else self.file, self.key, self.message)


# --------------------------------------------------------------------------
# The typed model
# --------------------------------------------------------------------------
@dataclass(frozen=True)
class OpSpec:
    """One ``process`` entry; ``index`` is its position, which names it in errors and checkpoints."""

    index: int
    name: str
    args: dict  # as written in the recipe (may be {})


@dataclass(frozen=True)
class PartitionConfig:
    """How the input is split.  ``extra`` keeps Data-Juicer's GPU-planning keys for the GPU preflight."""

    mode: str = "auto"
    num_of_partitions: int | None = None  # None = let the planner decide
    size: int | None = None
    target_size_mb: int = 256
    max_size_mb: int | None = None
    max_concurrent_partitions: int | None = None  # None = auto
    extra: dict = field(default_factory=dict)  # Data-Juicer GPU-planning keys, defaults filled


@dataclass(frozen=True)
class CheckpointConfig:
    """When op outputs are persisted.  ``enabled=False`` is always normalized to ``strategy="disabled"``."""

    enabled: bool = True
    strategy: str = "every_n_ops"
    n_ops: int = 5
    op_names: tuple[str, ...] = ()


@dataclass(frozen=True)
class IntermediateStorageConfig:
    """Format of checkpointed partitions; the format/compression pair is checked at load time."""

    format: str = "parquet"
    compression: str = "snappy"
    preserve_intermediate_data: bool = False
    retention_policy: str = "keep_all"
    #: Reuse the committed checkpoints of earlier jobs in the same work_dir whose partition content
    #: and op chain match (engine/storage/reuse_index.py, docs/nightly.md "Reuse across nights").
    reuse_across_jobs: bool = False


@dataclass(frozen=True)
class TracerConfig:
    """Data-Juicer's tracer keys (top-level in a recipe), grouped."""

    open_tracer: bool = False
    op_list_to_trace: tuple[str, ...] = ()
    trace_num: int = 10
    trace_keys: tuple[str, ...] = ()


@dataclass(frozen=True)
class DedupHistoryConfig:
    """``dedup_history:``: the listed deduplicators also remove rows exported by earlier jobs of the corpus
    whose history index lives at ``path`` (engine/history/)."""

    path: str
    ops: tuple[str, ...]
    memory_mb: int = DEFAULT_DEDUP_HISTORY_MEMORY_MB


@dataclass(frozen=True)
class ReviewConfig:
    """``review:``: bounds on what one job may remove before its export waits for a person
    (engine/job/review.py, docs/review_gate.md).

    ``max_removed_fraction``: an op removing more than this fraction of its input rows crosses it.
    ``max_removed_change``: an op whose removed fraction differs from the previous successful job's
    (same recipe, same work dir) by more than this, in fraction points, crosses it.  ``timeout_s``:
    how long the review waits (None: until answered); ``on_timeout``: the answer a timeout gives.
    ``sample_rows``: removed rows shown per crossed op."""

    max_removed_fraction: float | None = None
    max_removed_change: float | None = None
    timeout_s: float | None = None
    on_timeout: str = "reject"
    sample_rows: int = DEFAULT_REVIEW_SAMPLE_ROWS

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in REVIEW_FIELDS}


@dataclass(frozen=True)
class Recipe:
    """A validated recipe: paths absolute (or URLs), defaults filled, overrides applied.

    Only ``parse_recipe``/``load_recipe`` (validating) and ``recipe_from_dict``
    (trusted JSON) should build one.
    """

    source_file: str | None
    project_name: str
    dataset_path: str
    export_path: str
    work_dir: str
    text_keys: tuple[str, ...]
    np: int
    process: tuple[OpSpec, ...]
    executor_type: str
    partition: PartitionConfig
    checkpoint: CheckpointConfig
    intermediate_storage: IntermediateStorageConfig
    tracer: TracerConfig
    skip_op_error: bool
    keep_stats_in_res_ds: bool
    job_id: str | None
    resume: str | None
    schedule: str | None
    ignored_keys: tuple[str, ...]
    #: Failure-rate guard limit for every op (None: the default, engine/execution/failure_guard.py).
    max_failed_ratio: float | None = None
    #: Data-Juicer's export keys (engine/output/fields.py).
    keep_hashes_in_res_ds: bool = False
    export_in_parallel: bool = True
    export_shard_size: int = 0
    #: ``file`` or ``partition_shards`` (engine/config/export_keys.py).
    export_layout: str = "file"
    #: Deduplication against history (None: off).
    dedup_history: DedupHistoryConfig | None = None
    #: The review gate before export (None: no gate).
    review: ReviewConfig | None = None
    #: Data-Juicer's image_key, audio_key and video_key: the fields whose files are part of the job
    #: (engine/input/media.py) and from which auto partitioning detects the modality.
    image_key: str = "images"
    audio_key: str = "audios"
    video_key: str = "videos"
    #: Templated values (engine/config/templates.py): {"logical_date", "run_id", "values": {key path:
    #: {"template", "rendered"}}}; empty when the recipe has none.  "rendered" is absent at parse time.
    templates: dict = field(default_factory=dict)

    @property
    def media_keys(self) -> dict[str, str]:
        """{"image": image_key, "audio": audio_key, "video": video_key} (engine/input/media.py's MediaKeys)."""
        return {"image": self.image_key, "audio": self.audio_key, "video": self.video_key}

    @property
    def text_key(self) -> str:
        """The field ops read; Data-Juicer also uses only the first of text_keys."""
        return self.text_keys[0]

    def to_dict(self) -> dict:
        """Effective config as plain JSON types, defaults filled; inverse of ``recipe_from_dict``."""
        p = self.partition
        return {
            "source_file": self.source_file,
            "project_name": self.project_name,
            "dataset_path": self.dataset_path,
            "export_path": self.export_path,
            "work_dir": self.work_dir,
            "text_keys": list(self.text_keys),
            "np": self.np,
            "executor_type": self.executor_type,
            "process": [{op.name: copy.deepcopy(op.args)} for op in self.process],
            "partition": {**{k: getattr(p, k) for k in PARTITION_FIELDS}, **copy.deepcopy(p.extra)},
            "checkpoint": {
                "enabled": self.checkpoint.enabled,
                "strategy": self.checkpoint.strategy,
                "n_ops": self.checkpoint.n_ops,
                "op_names": list(self.checkpoint.op_names),
            },
            "intermediate_storage": {k: getattr(self.intermediate_storage, k) for k in STORAGE_FIELDS},
            "tracer": {
                "open_tracer": self.tracer.open_tracer,
                "op_list_to_trace": list(self.tracer.op_list_to_trace),
                "trace_num": self.tracer.trace_num,
                "trace_keys": list(self.tracer.trace_keys),
            },
            "skip_op_error": self.skip_op_error,
            "keep_stats_in_res_ds": self.keep_stats_in_res_ds,
            "job_id": self.job_id,
            "resume": self.resume,
            "schedule": self.schedule,
            "ignored_keys": list(self.ignored_keys),
            "max_failed_ratio": self.max_failed_ratio,
            # Export keys only when not the default, so the effective config of a job started before they
            # existed compares equal on resume (engine/job/resume.py refuses any changed result key).
            **({"keep_hashes_in_res_ds": True} if self.keep_hashes_in_res_ds else {}),
            **({"export_in_parallel": False} if not self.export_in_parallel else {}),
            **({"export_shard_size": self.export_shard_size} if self.export_shard_size > 0 else {}),
            **({"export_layout": self.export_layout} if self.export_layout != "file" else {}),
            **(
                {
                    "dedup_history": {
                        "path": self.dedup_history.path,
                        "ops": list(self.dedup_history.ops),
                        "memory_mb": self.dedup_history.memory_mb,
                    }
                }
                if self.dedup_history
                else {}
            ),
            **({"review": self.review.to_dict()} if self.review else {}),
            # Media keys only when not Data-Juicer's defaults, so a job started before they were read compares equal.
            **{k: getattr(self, k) for k, v in DEFAULT_MEDIA_KEYS.items() if getattr(self, k) != v},
            **({"templates": copy.deepcopy(self.templates)} if self.templates.get("values") else {}),
        }


def recipe_from_dict(d: dict) -> Recipe:
    """Rebuild a Recipe from ``Recipe.to_dict()`` output (no re-validation, no path resolution).

    Used where an already-validated config travels as JSON (XCom, task args)."""
    try:
        part = dict(d["partition"])
        ck, st, tr = d["checkpoint"], d["intermediate_storage"], d["tracer"]
        return Recipe(
            source_file=d.get("source_file"),
            project_name=d["project_name"],
            dataset_path=d["dataset_path"],
            export_path=d["export_path"],
            work_dir=d["work_dir"],
            text_keys=tuple(d["text_keys"]),
            np=d["np"],
            process=tuple(
                OpSpec(i, name, dict(args or {})) for i, item in enumerate(d["process"]) for name, args in item.items()
            ),
            executor_type=d["executor_type"],
            partition=PartitionConfig(
                **{k: part.pop(k) for k in PARTITION_FIELDS if k in part}, extra=copy.deepcopy(part)
            ),
            checkpoint=CheckpointConfig(ck["enabled"], ck["strategy"], ck["n_ops"], tuple(ck["op_names"])),
            intermediate_storage=IntermediateStorageConfig(**{k: st[k] for k in STORAGE_FIELDS}),
            tracer=TracerConfig(
                tr["open_tracer"], tuple(tr["op_list_to_trace"]), tr["trace_num"], tuple(tr["trace_keys"])
            ),
            skip_op_error=d["skip_op_error"],
            keep_stats_in_res_ds=d["keep_stats_in_res_ds"],
            job_id=d.get("job_id"),
            resume=d.get("resume"),
            schedule=d.get("schedule"),
            ignored_keys=tuple(d.get("ignored_keys", ())),
            max_failed_ratio=d.get("max_failed_ratio"),
            keep_hashes_in_res_ds=d.get("keep_hashes_in_res_ds", False),
            export_in_parallel=d.get("export_in_parallel", True),
            export_shard_size=d.get("export_shard_size", 0),
            export_layout=d.get("export_layout", "file"),
            dedup_history=(
                DedupHistoryConfig(
                    d["dedup_history"]["path"], tuple(d["dedup_history"]["ops"]), d["dedup_history"]["memory_mb"]
                )
                if d.get("dedup_history")
                else None
            ),
            review=ReviewConfig(**{k: d["review"][k] for k in REVIEW_FIELDS}) if d.get("review") else None,
            templates=copy.deepcopy(d.get("templates") or {}),
            **{k: d.get(k, v) for k, v in DEFAULT_MEDIA_KEYS.items()},
        )
    except (KeyError, TypeError) as exc:
        raise RecipeError(
            d.get("source_file") if isinstance(d, dict) else None,
            None,
            f"not a serialized recipe (from Recipe.to_dict): {exc!r}",
        ) from None
