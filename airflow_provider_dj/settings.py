"""The provider's settings: every ``DJ_*`` knob, declared once with its type, default and meaning.

Why one module: knobs read with ``os.environ.get`` wherever they are needed,
each with its own default and parsing, cannot be listed, and the same
variable can be read twice in one run with different results.  Here each knob is a :class:`Setting`; the values are
read from the environment once per process (:func:`current`) and the same
declarations become the provider's Airflow configuration section
(:func:`provider_config`, listed by ``airflow config list``) and the
"Settings" table of docs/recipe_keys.md (scripts/gen_docs.py).

Where a value comes from, first match wins:

1. ``AIRFLOW__DJ__<KEY>``: the name Airflow gives option ``<key>`` of the
   provider's ``[dj]`` section;
2. ``DJ_<KEY>``: the name this provider always read (kept, backward
   compatible);
3. the declared default.

An empty variable counts as unset.  Only the environment is read, never
``airflow.cfg``: the engine also runs in Ray workers and scripts that have
no Airflow configuration, and a value must mean the same everywhere (set
it in the environment of the workers and Ray nodes too).

This module imports nothing from Airflow, ``engine/`` or ``ops/`` (only ``core/``), so every
layer may import it.

Tests that change a variable in the middle of a process call :func:`reset`
(tests/conftest.py does it around every test) so the next read sees it.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Mapping

from airflow_provider_dj.core.errors import DJError

SECTION = "dj"
VERSION_ADDED = "0.1.0"
AIRFLOW_ENV_PREFIX = f"AIRFLOW__{SECTION.upper()}__"
LEGACY_ENV_PREFIX = "DJ_"

_TYPES = ("string", "integer", "float", "boolean")


class SettingError(DJError, ValueError):
    """A setting's value cannot be read as its declared type."""


@dataclass(frozen=True)
class Setting:
    """One knob: option ``key`` of the ``[dj]`` section, also read from ``DJ_<KEY>``."""

    key: str
    type: str  # one of _TYPES (Airflow's provider-config types)
    default: Any  # None: unset (the code that reads it decides, and the doc says what happens)
    doc: str
    example: str | None = None
    #: Changes what a job writes to its job directory: the value is recorded in the
    #: job's effective config (``settings`` key) so a resume can tell what was used.
    on_disk: bool = False
    #: Read at each use instead of once per process: a fault seam that a test turns on and
    #: off within one process, or a value another cache keys on.
    live: bool = False

    @property
    def env_name(self) -> str:
        return LEGACY_ENV_PREFIX + self.key.upper()

    @property
    def airflow_env_name(self) -> str:
        return AIRFLOW_ENV_PREFIX + self.key.upper()


def _s(
    key: str,
    type_: str,
    default: Any,
    doc: str,
    example: str | None = None,
    *,
    on_disk: bool = False,
    live: bool = False,
) -> Setting:
    if type_ not in _TYPES:
        raise ValueError(f"setting {key}: type {type_!r} is not one of {_TYPES}")
    return Setting(key, type_, default, doc, example, on_disk, live)


#: Every knob, in the order the docs list them.
SETTINGS: tuple[Setting, ...] = (
    # -- where things live --------------------------------------------------
    _s(
        "airflow_home",
        "string",
        None,
        "Airflow home of `dj-airflow run` when AIRFLOW_HOME is unset (AIRFLOW_HOME wins); "
        "unset: `~/.dj-airflow/airflow`.",
        "/srv/dj-airflow",
    ),
    _s(
        "work_dir",
        "string",
        None,
        "The work_dir the CLI, the control API and the monitor look in when none is given; unset: `.`.",
        "/data/dj-work",
    ),
    _s(
        "allowed_roots",
        "string",
        None,
        "Comma-separated local path prefixes and URL roots (`s3://bucket/prefix`) that every path a run "
        "resolves (dataset_path and the files it lists, export_path, work_dir, dedup_history.path, op model "
        "and word-list paths) must lie under, after templates, overrides, `~`, `..` and symlinks; a run "
        "naming another is refused by its first step, before anything is read or written. Unset: no "
        "confinement (docs/deployment.md, Confining paths).",
        "/data/corpus,s3://corpus-bucket/clean",
    ),
    _s(
        "state_dir",
        "string",
        None,
        "Directory of the recent-jobs registry (`jobs.json`); unset: `$XDG_CACHE_HOME/airflow-provider-dj`.",
        "/var/lib/dj-state",
    ),
    _s(
        "recipes_dir",
        "string",
        None,
        "Folder whose `*.yaml`/`*.yml` recipes `dags/dj_recipes.py` turns into DAGs; unset: the `recipes` folder beside that DAG file, wherever it was deployed.",
        "/opt/airflow/recipes",
    ),
    _s(
        "example_train_recipe",
        "string",
        None,
        "Recipe file of the example DAG `example_train_on_export`; unset: `dags/recipes/demo.yaml`.",
        "/opt/airflow/recipes/demo.yaml",
    ),
    # -- Airflow tasks -------------------------------------------------------
    _s("task_retries", "integer", 2, "Retries of every task of a generated DAG.", "0"),
    _s("task_retry_delay_s", "float", 10.0, "Seconds between a task's retries.", "30"),
    _s(
        "default_group_size",
        "integer",
        None,
        "Partitions per mapped partition task when the recipe does not set execution_group_size; "
        "unset: 1 under a scheduler, the CPU count under `dj-airflow run`.",
        "4",
    ),
    _s(
        "default_max_concurrent_partitions",
        "integer",
        None,
        "Partitions run at once by a CPU-only pipeline whose max_concurrent_partitions is `auto`; "
        "unset: 4 under a scheduler, the CPU count under `dj-airflow run`; a bad value counts as unset.",
        "8",
    ),
    _s(
        "max_groups_per_segment",
        "integer",
        256,
        "Most mapped task instances (execution groups) of one segment when the recipe sets no integer "
        "execution_group_size: past it partitions share groups, so the grid stays readable and each run "
        "starts fewer task processes; 0: only Airflow's [core] max_map_length bounds them.",
        "512",
    ),
    # -- the job directory ---------------------------------------------------
    _s(
        "lock_stale_s",
        "float",
        600.0,
        "A job's runner lock whose heartbeat is older than this many seconds may be taken over.",
        "1200",
    ),
    _s(
        "progress_interval_s",
        "float",
        10.0,
        "Seconds between progress lines of a long op in the task log.",
        "30",
    ),
    _s(
        "heartbeat_interval_s",
        "float",
        10.0,
        "Seconds between two heartbeats of a running partition when its work has not moved "
        "(heartbeats/partition_NNNNN.json; a move is written within a second).",
        "30",
    ),
    _s(
        "op_slice_mb",
        "float",
        256.0,
        "A per-row op (mapper, filter, a global op's keys) runs on slices of a partition holding at most "
        "this many MiB of text, one after the other: Arrow's string arrays hold at most 2 GiB, and a "
        "slice bounds the op's working memory. Results do not depend on it.",
        "512",
    ),
    _s(
        "partition_memory_limit_gb",
        "float",
        None,
        "The memory one partition may use on a worker; a plan whose largest partition would need more "
        "(about 3.5x its input bytes) is refused before any work. Unset: the memory of the machine that "
        "plans the job; set it when the workers have another size.",
        "64",
    ),
    _s(
        "global_step_memory_limit_gb",
        "float",
        None,
        "The memory of the machine that runs a global op's step (the job's driver, or the global task's "
        "worker); a job whose rows' keys would need more (about 78 bytes a row) is refused before any "
        "work. Unset: the memory of the machine that plans the job.",
        "64",
    ),
    _s(
        "planning_chunk_mb",
        "integer",
        64,
        "Planning indexes an uncompressed JSON Lines file in chunks of about this many MiB, each a task of "
        "its own (on this machine's cores, or on Ray where the task that plans is connected to it), so "
        "planning time falls with cores; partitions are hashed a task each. The plan does not depend on it.",
        "256",
    ),
    _s(
        "global_step_shards",
        "integer",
        0,
        "Key shards of a global op's step (a deduplicator's decision over every row): each shard resolves "
        "in its own task, on Ray where Ray runs, and commits on its own, so a retry redoes only shards not "
        "committed. `0`: one in-process step while the rows' keys fit `global_step_in_process_max_mb`, "
        "else as many shards as keep each within `global_shard_memory_mb`. The export does not depend on it.",
        "64",
    ),
    _s(
        "global_step_in_process_max_mb",
        "integer",
        128,
        "A global op's step whose keys need at most this much (about 78 bytes a row: 128 MB is 1.7M rows) "
        "runs in the process of its task, where it is fastest; above it, in key shards whose tasks run on "
        "Ray, so the task's process (an Airflow worker, `dj-airflow run`) stays small whatever the rows. "
        "`[dj] global_step_shards` overrides it.",
        "1024",
    ),
    _s(
        "global_shard_memory_mb",
        "integer",
        1024,
        "The memory one task of a sharded global step may use, its whole process: about 256 MiB for its Ray "
        "worker's own, the rest for its data (a key shard, a round of its connected components, a partition's "
        "keep mask; at least 288); it sets the shards the planner plans (`global_step_shards: 0`), and a plan "
        "whose shard would need more is refused with the figures.",
        "4096",
    ),
    _s(
        "delta_checkpoints",
        "boolean",
        True,
        "Parquet/Arrow checkpoints after the first store only the columns an op changed; `0` writes "
        "whole tables (other tools can read them). Changes the checkpoint files: recorded in the job's "
        "effective config.",
        "0",
        on_disk=True,
    ),
    _s(
        "input_index_cache",
        "boolean",
        True,
        "With `reuse_across_jobs`, planning takes an input file's row count, boundary offsets and "
        "partition hashes from an earlier job when the file's path, device, inode, size, mtime and ctime "
        "are unchanged, instead of reading it again; `0` reads and hashes every byte (for file systems "
        "whose ctime cannot be trusted).",
        "0",
    ),
    _s(
        "checkpoint_pipeline",
        "boolean",
        True,
        "Write a checkpoint in the background while the next batch runs; `0` writes every checkpoint "
        "synchronously (same bytes).",
        "0",
    ),
    _s(
        "lineage",
        "boolean",
        True,
        "Record every input row's fate (kept, changed, filtered, duplicate, failed) under `lineage/` for "
        "`dj-airflow why`. A benchmark switch: `0` only to measure what recording costs.",
        "0",
    ),
    _s(
        "parallel_export_min_rows",
        "integer",
        200_000,
        "From this many rows a JSONL export is serialized in parallel on Ray workers (same bytes); 0: always.",
        "0",
    ),
    # -- storage -------------------------------------------------------------
    _s(
        "storage_conn_id",
        "string",
        None,
        "Airflow connection (type `aws`) with the credentials for `s3://` paths; unset: the AWS_* "
        "environment variables. Read at each use (the credentials cache is keyed on it).",
        "dj_s3",
        live=True,
    ),
    _s(
        "storage_enospc",
        "string",
        None,
        "Fault seam for tests: `<substring>[@<n>]` makes writes whose path contains the substring "
        "fail with ENOSPC (after n good ones). Read at each write, so a test can free the space again.",
        "checkpoints@2",
        live=True,
    ),
    # -- Ray -----------------------------------------------------------------
    _s(
        "ray_state_dir",
        "string",
        None,
        "Where the shared embedded Ray head records itself; unset: `~/.cache/airflow-provider-dj`.",
        "/var/lib/dj-ray",
    ),
    _s(
        "ray_head_port",
        "integer",
        None,
        "Port of the shared embedded Ray head; unset: 26379, or a free port when that one is taken.",
        "26379",
    ),
    _s(
        "ray_jobs_deferrable",
        "boolean",
        True,
        "In Ray Jobs mode the generated DAGs' tasks (validate, partition groups, global steps, the export) "
        "wait for their Ray Jobs in the triggerer, holding no worker slot; `0` waits in the worker instead "
        "(a deployment without a triggerer). A recipe's `partition.ray_jobs_deferrable` overrides it for its "
        "DAG. Either way a retry reattaches to the running Ray job.",
        "0",
    ),
    _s(
        "local_work_max_rows",
        "integer",
        100000,
        '`dj-airflow run` and `run_job(executor="auto")` decide after planning where partitions run: when '
        "the partitions left to compute (not committed, not reusable from an earlier job) hold at most this "
        "many rows, on a local process pool (one partition: in the calling process) without starting Ray; "
        "above it, on Ray. `0` always starts Ray. Recipes that need Ray (GPU or actor ops, a cluster at "
        "`RAY_ADDRESS`) start it whatever the rows.",
        "0",
    ),
    _s(
        "ray_early_start",
        "boolean",
        True,
        "`dj-airflow run` starts its private Ray in the background at launch when the input has rows; "
        "`0` starts it when the first task needs it.",
        "0",
    ),
    _s(
        "cli_fast_exit",
        "boolean",
        True,
        "`dj-airflow run` kills its Ray processes and leaves with os._exit once everything is written; "
        "`0` keeps the ordinary (3-4 s slower) exit.",
        "0",
    ),
    _s(
        "cli_progress_interval_s",
        "float",
        30.0,
        "Seconds between the `progress: ...` lines `dj-airflow run` prints when its output is not a "
        "terminal (a pipe, cron, CI); `0` prints none (docs/cli_progress.md).",
        "10",
    ),
    _s(
        "cli_force_exit_after_s",
        "float",
        10.0,
        "After a forced stop of `dj-airflow run` (a second Ctrl-C, or SIGTERM), seconds to wait for the "
        "run to end before its processes are killed; committed checkpoints are kept either way.",
        "30",
    ),
    # -- GPU -----------------------------------------------------------------
    _s(
        "probe_executor",
        "string",
        None,
        "Where the GPU preflight probe runs when the operator does not say: `auto`, `local`, `ray`; unset: `auto`.",
        "local",
    ),
    _s(
        "probe_force_cpu",
        "boolean",
        False,
        "The GPU probe and `dj-gpu-check` take the CPU path (`1`, `true` or `yes`).",
        "1",
    ),
    _s(
        "gc_keep_last_n_jobs",
        "integer",
        3,
        "`dj-airflow gc` keeps the checkpoints of this many newest completed jobs per work dir (running, "
        "resumable and referenced jobs are always kept); `--keep-last-n-jobs` overrides it.",
        "7",
    ),
    _s(
        "gc_max_bytes",
        "integer",
        None,
        "`dj-airflow gc` also drops older completed jobs' checkpoints, oldest first, until the kept ones fit "
        "in this many bytes (never a running, resumable or referenced job's); unset: no size budget.",
        "500000000000",
    ),
    _s(
        "embed_model_dir",
        "string",
        None,
        "Embedding model folder `dj-gpu-check` loads; unset: the packaged all-MiniLM-L6-v2.",
        "/models/all-MiniLM-L6-v2",
    ),
)

BY_KEY: Mapping[str, Setting] = MappingProxyType({s.key: s for s in SETTINGS})

_AIRFLOW_TRUE = ("true", "t", "1")
_AIRFLOW_FALSE = ("false", "f", "0")


def _parse(setting: Setting, raw: str, name: str) -> Any:
    """``raw`` from variable ``name`` as the setting's type.

    Booleans keep the meaning each ``DJ_*`` name always had, so an old
    environment behaves as before: a knob that is on by default is turned
    off by ``0`` only, one that is off by default is turned on by ``1``,
    ``true`` or ``yes``.  The ``AIRFLOW__DJ__*`` names read booleans the way
    Airflow does (``true``/``t``/``1``, ``false``/``f``/``0``)."""
    if setting.type == "string":
        return raw
    if setting.type == "boolean":
        low = raw.lower()
        if name == setting.airflow_env_name:
            low = low.strip()
            if low in _AIRFLOW_TRUE:
                return True
            if low in _AIRFLOW_FALSE:
                return False
            raise SettingError(f"{name}={raw!r} is not a boolean; use true or false")
        if setting.default:
            return raw != "0"
        return low in ("1", "true", "yes")
    try:
        return int(raw) if setting.type == "integer" else float(raw)
    except ValueError:
        raise SettingError(
            f"{name}={raw!r} is not {'a whole number' if setting.type == 'integer' else 'a number'}"
        ) from None


@dataclass(frozen=True)
class _Snapshot:
    raw: Mapping[str, tuple[str, str]]  # key -> (variable name, raw value), set variables only


def _lookup(setting: Setting) -> tuple[str, str] | None:
    for name in (setting.airflow_env_name, setting.env_name):
        value = os.environ.get(name)
        if value:
            return name, value
    return None


def _read_environment() -> _Snapshot:
    raw: dict[str, tuple[str, str]] = {}
    for s in SETTINGS:
        found = _lookup(s)
        if found is not None:
            raw[s.key] = found
    return _Snapshot(MappingProxyType(raw))


_lock = threading.Lock()
_cache: dict[str, Any] = {}


def _snapshot() -> _Snapshot:
    snap = _cache.get("snapshot")
    if snap is None:
        with _lock:
            snap = _cache.get("snapshot")
            if snap is None:
                snap = _cache["snapshot"] = _read_environment()
    return snap


def reset() -> None:
    """Forget the values read so far: the next read looks at the environment again.

    For tests that set a variable mid-process, and for the CLI after it set one
    for the tasks it runs in this process."""
    with _lock:
        _cache.clear()


def _found(key: str) -> tuple[str, str] | None:
    setting = BY_KEY[key]
    return _lookup(setting) if setting.live else _snapshot().raw.get(key)


def raw(key: str) -> str | None:
    """The setting's unparsed value (None when unset), for code that parses it with its own message."""
    found = _found(key)
    return found[1] if found else None


def source(key: str) -> str | None:
    """Which variable the value came from (``AIRFLOW__DJ__...`` or ``DJ_...``), None for the default."""
    found = _found(key)
    return found[0] if found else None


def get(key: str) -> Any:
    """The setting's value as its declared type, or its default.  Raises SettingError for a bad value."""
    setting = BY_KEY[key]
    found = _found(key)
    if found is None:
        return setting.default
    return _parse(setting, found[1], found[0])


def current() -> dict[str, Any]:
    """Every setting's value (key -> value)."""
    return {s.key: get(s.key) for s in SETTINGS}


def on_disk() -> dict[str, Any]:
    """The settings that change the job-directory format, for the job's effective config."""
    return {s.key: get(s.key) for s in SETTINGS if s.on_disk}


def _config_value(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "True" if value else "False"
    return str(value)


def provider_config() -> dict:
    """The ``config`` entry of ``get_provider_info()``: Airflow's provider-config schema
    (section -> description, options -> {description, version_added, type, example, default})."""
    return {
        SECTION: {
            "description": "Settings of airflow-provider-dj. Each option is also read from DJ_<OPTION> "
            "(AIRFLOW__DJ__<OPTION> wins); only the environment is read, in every process "
            "that runs the engine (workers, Ray nodes).",
            "options": {
                s.key: {
                    "description": f"{s.doc} Also {s.env_name}.",
                    "version_added": VERSION_ADDED,
                    "type": s.type,
                    "example": s.example,
                    "default": _config_value(s.default),
                }
                for s in SETTINGS
            },
        }
    }
