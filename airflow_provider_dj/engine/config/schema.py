"""The recipe data model: ``RecipeError``, key tables, defaults and the frozen dataclasses.

Import from ``airflow_provider_dj.engine.config.recipe``, which re-exports all of it;
the split only keeps the validating parser (recipe.py) short.

Why the tables live here: ``recipe.py`` (the parser) and ``overrides.py``
(trigger-time overrides) both need to know which keys exist, which are ours,
which are Data-Juicer keys we accept but ignore, and which a trigger may
change.  Keeping the tables here lets both import them without importing each
other, and keeps the parser readable.

The Data-Juicer key names below were collected from Data-Juicer 1.6.1's
global options (``config_all.yaml`` / ``config.py``).  A recipe written for
Data-Juicer must load here unchanged, so every global key it knows is either
used by this provider or listed in ``DJ_IGNORED_KEYS``.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_dj.core.errors import DJError


class RecipeError(DJError, ValueError):
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
# Enums
# --------------------------------------------------------------------------
EXECUTOR_TYPE = "ray_partitioned"
PARTITION_MODES = ("auto", "manual")
CHECKPOINT_STRATEGIES = ("every_op", "every_n_ops", "manual", "disabled")
STORAGE_FORMATS = ("parquet", "arrow", "jsonl")
RETENTION_POLICIES = ("keep_all", "keep_failed_only", "cleanup_all")
#: Codecs each intermediate format can actually write (pyarrow's Parquet
#: writer, Arrow IPC writer, and the JSONL writer's stream compressors).
#: Checking the pair at load time keeps "arrow + snappy" from failing mid-run.
STORAGE_COMPRESSIONS: dict[str, tuple[str, ...]] = {
    "parquet": ("snappy", "gzip", "zstd", "none"),
    "arrow": ("zstd", "none"),
    "jsonl": ("gzip", "zstd", "none"),
}
#: Codec used when the recipe names a format but no compression.
DEFAULT_COMPRESSION = {"parquet": "snappy", "arrow": "none", "jsonl": "none"}

SCHEDULE_PRESETS = (
    "@once",
    "@continuous",
    "@hourly",
    "@daily",
    "@weekly",
    "@monthly",
    "@quarterly",
    "@yearly",
    "@annually",
)

# --------------------------------------------------------------------------
# Paths
# --------------------------------------------------------------------------
#: Input file suffixes the reader understands (.json is read as JSON Lines,
#: as Data-Juicer's loader does for line-delimited files).
DATASET_SUFFIXES = (
    ".jsonl",
    ".json",
    ".jsonl.gz",
    ".json.gz",
    ".jsonl.zst",
    ".json.zst",
    ".parquet",
)
#: Output suffixes.  ``.json`` is written as JSON Lines, like Data-Juicer does.
EXPORT_SUFFIXES = (".jsonl", ".json", ".parquet")
#: Extensions that clearly name a data file we cannot read.  Anything else
#: without a supported suffix is taken to be a directory (names like
#: ``corpus.v2`` are legal directories), so only these produce an error.
UNSUPPORTED_DATA_EXTENSIONS = frozenset(
    {
        "csv",
        "tsv",
        "txt",
        "arrow",
        "feather",
        "avro",
        "orc",
        "gz",
        "zst",
        "bz2",
        "xz",
        "zip",
        "tar",
        "tgz",
        "md",
        "html",
        "pdf",
        "docx",
        "xlsx",
        "pkl",
        "npy",
        "lz4",
    }
)
GLOB_CHARS = "*?["

#: job_id / resume: they become directory names under work_dir, so they must
#: be one safe path component.
SAFE_ID_RE = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,127}$")

# --------------------------------------------------------------------------
# Top level
# --------------------------------------------------------------------------
TRACER_KEYS = ("open_tracer", "op_list_to_trace", "trace_num", "trace_keys")
SECTIONS = ("partition", "checkpoint", "intermediate_storage", "dedup_history")

#: Top-level keys this provider reads.
OWN_TOP_LEVEL_KEYS = (
    "project_name",
    "dataset_path",
    "export_path",
    "work_dir",
    "text_keys",
    "np",
    "process",
    "executor_type",
    *SECTIONS,
    *TRACER_KEYS,
    "skip_op_error",
    "keep_stats_in_res_ds",
    "job_id",
    "resume",
    "schedule",
    "partition_size",  # Data-Juicer's deprecated alias of partition.size
    "max_failed_ratio",  # the failure-rate guard (engine/execution/failure_guard.py); ours, not Data-Juicer's
    # Data-Juicer's export keys, honoured or refused with a reason (engine/output/fields.py)
    "export_type",
    "export_shard_size",
    "export_in_parallel",
    "keep_hashes_in_res_ds",
    "encrypt_before_export",
    "decrypt_after_reading",
)

DEFAULT_NP = 4
DEFAULT_TEXT_KEYS = ("text",)
DEFAULT_SKIP_OP_ERROR = True  # Data-Juicer's default
DEFAULT_PROJECT_NAME = "dj_recipe"  # only when there is no file to name it after

#: Data-Juicer global keys accepted for compatibility but not used here; the
#: caller logs them as a warning so nobody expects them to take effect.
DJ_IGNORED_KEYS = frozenset(
    {
        "dataset",
        "validators",
        "export_extra_args",
        "load_dataset_kwargs",
        "load_jsonl_lenient",
        "auto_op_parallelism",
        "elastic_juicer_adaptive_batching",
        "elastic_juicer_profile_seed",
        "suffixes",
        "turbo",
        "use_cache",
        "ds_cache_dir",
        "open_monitor",
        "use_checkpoint",
        "temp_dir",
        "op_fusion",
        "fusion_strategy",
        "cache_compress",
        "adaptive_batch_size",
        "encryption_key_path",
        "image_key",
        "image_bytes_key",
        "image_special_token",
        "audio_key",
        "audio_special_token",
        "video_key",
        "video_special_token",
        "eoc_special_token",
        "use_dag",
        "read_options",
        "ray_address",
        "override_num_blocks",
        "percentiles",
        "export_original_dataset",
        "save_stats_in_one_file",
        "data_probe_algo",
        "data_probe_ratio",
        "hpo_config",
        "custom_operator_paths",
        "strict_preflight",
        "event_logging",
        "event_log_dir",
        "checkpoint_dir",
        "partition_dir",
        "generated_dataset_config",
        "export_aws_credentials",
        "mapper_fusion",
        "mapper_fusion_vram_limit",
        "min_common_dep_num_to_combine",
        "conflict_resolve_strategy",
        "open_insight_mining",
        "op_list_to_mine",
        "auto_num",
        "debug",
    }
)

# --------------------------------------------------------------------------
# Sections
# --------------------------------------------------------------------------
PARTITION_FIELDS = (
    "mode",
    "num_of_partitions",
    "size",
    "target_size_mb",
    "max_size_mb",
    "max_concurrent_partitions",
)
#: Data-Juicer's other partition keys (GPU planning).  Kept, with defaults
#: filled in, in ``PartitionConfig.extra`` for the GPU preflight.  Value is
#: (default, kind) where kind names the check in recipe.py.
PARTITION_EXTRA: dict[str, tuple[Any, str]] = {
    "partitions_per_node": ("auto", "auto_or_pos_int"),
    "max_gpu_workers_per_device": (5, "pos_int"),
    "max_concurrent_gpu_probes": ("auto", "auto_or_pos_int"),
    "gpu_preflight_enabled": (True, "bool"),
    "gpu_probe_timeout_seconds": (None, "opt_pos_number"),
    "gpu_probe_warmup_batches": (1, "nonneg_int"),
    "gpu_probe_steady_batches": (3, "pos_int"),
    "gpu_probe_sample_offset": (0, "nonneg_int"),
    "gpu_probe_sample_shuffle": (False, "bool"),
    "gpu_probe_sample_seed": (42, "opt_int"),
    "execution_group_size": ("auto", "auto_or_pos_int"),
    "max_initialization_overhead_ratio": (0.1, "ratio"),
    # Airflow pool for the partition tasks (must exist); docs/gpu_planning.md.
    "pool": (None, "opt_str"),
    # rows: one even split of all rows; file: partitions never span two input files, so a growing
    # input keeps its old partitions for reuse across jobs (docs/nightly.md, "Reuse across nights").
    "align": ("rows", "align"),
}
PARTITION_ALIGNS = ("rows", "file")
DEFAULT_MANUAL_PARTITIONS = 4  # Data-Juicer's count when manual mode gives neither count nor size

CHECKPOINT_FIELDS = ("enabled", "strategy", "n_ops", "op_names")
STORAGE_FIELDS = ("format", "compression", "preserve_intermediate_data", "retention_policy", "reuse_across_jobs")
#: Deduplication against earlier runs of a corpus (engine/history/, docs/nightly.md).
DEDUP_HISTORY_FIELDS = ("path", "ops", "memory_mb")
#: The deduplicators whose keys a history index can hold: exact keys and MinHash LSH bands are looked up by
#: equality; SimHash (a Hamming-distance query) and Data-Juicer's adapted ops are not supported.
DEDUP_HISTORY_OPS = ("document_deduplicator", "document_minhash_deduplicator")
DEFAULT_DEDUP_HISTORY_MEMORY_MB = 256

SECTION_KEYS: dict[str, tuple[str, ...]] = {
    "partition": PARTITION_FIELDS + tuple(PARTITION_EXTRA),
    "checkpoint": CHECKPOINT_FIELDS,
    "intermediate_storage": STORAGE_FIELDS,
    "dedup_history": DEDUP_HISTORY_FIELDS,
}

#: Keys whose value is a path or an id: ``--set`` keeps their text verbatim
#: instead of YAML-parsing it (``job_id=007`` must not become the int 7).
STRING_VALUED_KEYS = frozenset({"dataset_path", "export_path", "work_dir", "job_id", "resume"})


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
    #: Deduplication against history (None: off).
    dedup_history: DedupHistoryConfig | None = None
    #: Templated values (engine/config/templates.py): {"logical_date", "run_id", "values": {key path:
    #: {"template", "rendered"}}}; empty when the recipe has none.  "rendered" is absent at parse time.
    templates: dict = field(default_factory=dict)

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
            # existed compares equal on resume (engine/jobdir/resume.py refuses any changed result key).
            **({"keep_hashes_in_res_ds": True} if self.keep_hashes_in_res_ds else {}),
            **({"export_in_parallel": False} if not self.export_in_parallel else {}),
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
            dedup_history=(
                DedupHistoryConfig(
                    d["dedup_history"]["path"], tuple(d["dedup_history"]["ops"]), d["dedup_history"]["memory_mb"]
                )
                if d.get("dedup_history")
                else None
            ),
            templates=copy.deepcopy(d.get("templates") or {}),
        )
    except (KeyError, TypeError) as exc:
        raise RecipeError(
            d.get("source_file") if isinstance(d, dict) else None,
            None,
            f"not a serialized recipe (from Recipe.to_dict): {exc!r}",
        ) from None
