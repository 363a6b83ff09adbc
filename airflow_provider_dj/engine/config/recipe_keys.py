"""The recipe's key tables: which keys exist, which are ours, which are Data-Juicer's and ignored, which a
trigger may change, the enums and the defaults.

Plain data, no classes: ``recipe.py`` (the parser), ``section_parsers.py``, ``overrides.py`` (trigger-time
overrides), ``templates.py`` and ``scripts/gen_docs.py`` (docs/recipe_keys.md) all read them, and
``schema.py`` (the typed model) re-exports them, so ``schema.X`` keeps working.  Kept apart from the
dataclasses because the two change for different reasons: a Data-Juicer release adds keys here, a new
recipe feature adds fields there.

The Data-Juicer key names below were collected from Data-Juicer 1.6.1's
global options (``config_all.yaml`` / ``config.py``).  A recipe written for
Data-Juicer must load here unchanged, so every global key it knows is either
used by this provider or listed in ``DJ_IGNORED_KEYS``.
"""

from __future__ import annotations

import re
from typing import Any

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
SECTIONS = ("partition", "checkpoint", "intermediate_storage", "dedup_history", "review")

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
    # Data-Juicer's media keys: the fields naming media files (engine/input/media.py, modality.py)
    "image_key",
    "audio_key",
    "video_key",
    # Data-Juicer's export keys, honoured or refused with a reason (engine/output/fields.py)
    "export_type",
    "export_shard_size",
    "export_layout",  # ours: one shard per partition (engine/config/export_keys.py)
    "export_in_parallel",
    "keep_hashes_in_res_ds",
    "encrypt_before_export",
    "decrypt_after_reading",
)

DEFAULT_NP = 4
DEFAULT_TEXT_KEYS = ("text",)
#: Data-Juicer's defaults of image_key, audio_key and video_key.
DEFAULT_MEDIA_KEYS = {"image_key": "images", "audio_key": "audios", "video_key": "videos"}
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
        "image_bytes_key",
        "image_special_token",
        "audio_special_token",
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
    # Ray Jobs mode: whether this DAG's tasks wait for their Ray Jobs in the triggerer (true) or in
    # their worker (false); null = the deployment's [dj] ray_jobs_deferrable (docs/deployment.md).
    "ray_jobs_deferrable": (None, "opt_bool"),
    # rows: one even split of all rows; file: partitions never span two input files, so a growing
    # input keeps its old partitions for reuse across jobs (docs/nightly.md, "Reuse across nights").
    "align": ("rows", "align"),
    # The watchdog (engine/execution/watchdog.py, docs/stop_and_kill.md): a running partition with no
    # progress for this many seconds is cancelled and retried from its checkpoint; null = off.
    "stall_timeout_s": (None, "opt_pos_number"),
    # How many times a stalled partition is retried before its task fails naming it.
    "stall_retries": (1, "nonneg_int"),
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
#: The review gate before export (engine/job/review.py, docs/review_gate.md).
REVIEW_FIELDS = ("max_removed_fraction", "max_removed_change", "timeout_s", "on_timeout", "sample_rows")
REVIEW_ON_TIMEOUT = ("reject", "approve")
DEFAULT_REVIEW_SAMPLE_ROWS = 5

SECTION_KEYS: dict[str, tuple[str, ...]] = {
    "partition": PARTITION_FIELDS + tuple(PARTITION_EXTRA),
    "checkpoint": CHECKPOINT_FIELDS,
    "intermediate_storage": STORAGE_FIELDS,
    "dedup_history": DEDUP_HISTORY_FIELDS,
    "review": REVIEW_FIELDS,
}

#: Keys whose value is a path or an id: ``--set`` keeps their text verbatim
#: instead of YAML-parsing it (``job_id=007`` must not become the int 7).
STRING_VALUED_KEYS = frozenset({"dataset_path", "export_path", "work_dir", "job_id", "resume"})
