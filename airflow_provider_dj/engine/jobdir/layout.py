"""The job directory's layout: every well-known file name and path in one place.

Everything a task needs is in the job directory, so any task on any node
can reconstruct the job from ``(work_dir, job_id)`` alone: XComs are lost
on a UI clear, the job directory is not.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import orjson

from airflow_provider_dj.core import fs as storage

# Paths are relative to the job directory, "/"-separated (JobPaths.path / JobContext.path split them).
# Changing any of these changes the job-directory format: an older job would no longer resume.

#: The recipe as the job runs it (overrides applied), written by validate.
EFFECTIVE_CONFIG = "metadata/effective_config.json"
#: The failure-rate guard's limits, rewritten by every validate (a resume may raise them).
FAILURE_GUARD = "metadata/failure_guard.json"
#: The review gate's bounds (job/review.py), rewritten by every validate (a resume may raise them).
REVIEW_BOUNDS = "metadata/review_bounds.json"
#: One runner per job (jobdir/lock.py).
RUNNER_LOCK = "metadata/runner.lock"
#: The history-index version a job deduplicates against (engine/history/pin.py), written once by the
#: validate task of a new job: retries, resumes and clears read the same version, never a newer one.
DEDUP_HISTORY_PIN = "metadata/dedup_history_pin.json"
#: Per history-checking op: every row it removed as a history duplicate and the history row matched.
DEDUP_HISTORY_DIR = "dedup_history"
#: Stop requests (jobdir/stop_control.py).
STOP_REQUEST = "control/stop_request.json"
#: Per-op, per-partition checkpoints (storage/checkpoints.py), and the exact partitions.
CHECKPOINTS_DIR = "checkpoints"
PARTITIONING_INFO = "checkpoints/partitioning_info.json"
#: Each media file's digest, per partition (engine/input/media_digests.py): what planning read for the
#: partitions whose rows name media files, kept out of partitioning_info.json, which every task reads.
MEDIA_DIGESTS_DIR = "checkpoints/media_digests"
#: Media files an op writes (``Op.writes_media``: image_blur_mapper's blurred copies), per op and
#: partition, beside the op's checkpoints: ``checkpoints/media_op_<i>_<op>/partition_<p>/<file>``,
#: and their manifest ``checkpoints/media_op_<i>_<op>/partition_<p>.json`` (each file's size and
#: xxh3), whose own seal the op's accounting entry holds (integrity.MEDIA_MANIFEST_KEY), so the
#: checkpoint that commits the rows naming them commits the files too.  Retention and gc remove them
#: with the checkpoints.
MEDIA_DIR_PREFIX = "media_op_"


def media_dir(op_index: int, op_name: str, partition_id: int) -> str:
    """``checkpoints/media_op_<i>_<op>/partition_<p>`` (relative path): op i's files of one partition."""
    return f"{CHECKPOINTS_DIR}/{MEDIA_DIR_PREFIX}{op_index:03d}_{op_name}/{partition_name(partition_id)}"


def media_manifest(op_index: int, op_name: str, partition_id: int) -> str:
    """``checkpoints/media_op_<i>_<op>/partition_<p>.json`` (relative path): the files of :func:`media_dir`
    that op i's output names, each with its size and xxh3."""
    return f"{media_dir(op_index, op_name, partition_id)}.json"


#: The plan as people and tools read it (planning/execution_plan.py).
EXECUTION_PLAN = "dag_execution_plan.json"
#: How the job ended (job/summary.py).
JOB_SUMMARY = "job_summary.json"
#: The media files the export names, as placed beside it (output/media.py: each copy's path, size, xxh3
#: and the job-directory file it came from), sealed in the summary; a completed job's re-run checks them.
EXPORT_MEDIA_RECORD = "export_media.json"
#: Samples an op failed on, per op and partition, with the reason.
FAILED_DIR = "failed"


def partition_name(partition_id: int) -> str:
    """How a partition is named in every per-partition file and folder: ``partition_00003``."""
    return f"partition_{partition_id:05d}"


def media_digests_file(partition_id: int) -> str:
    """``checkpoints/media_digests/partition_<p>.json`` (relative path): the partition's media files' digests."""
    return f"{MEDIA_DIGESTS_DIR}/{partition_name(partition_id)}.json"


def op_dir_name(op_index: int, op_name: str) -> str:
    """How an op is named in every per-op folder: ``op_003_words_num_filter``."""
    return f"op_{op_index:03d}_{op_name}"


#: Per-op, per-partition state under checkpoints/ (storage/checkpoints.py's CheckpointStore, one folder
#: per op: ``<store>_<i>_<op>``): op outputs, deduplicator keys and global steps' keep masks.  The store
#: names also enter reuse fingerprints (execution/reuse.py), so they never change.
CHECKPOINT_STORE = "checkpoint_op"
DEDUP_KEYS_STORE = "dedup_keys_op"
DEDUP_MASK_STORE = "dedup_mask_op"
#: Folder-name prefixes of all per-op state under checkpoints/ (what retention and gc remove); the media
#: files ops wrote go with the checkpoints that name them.
STATE_DIR_PREFIXES = tuple(f"{s}_" for s in (CHECKPOINT_STORE, DEDUP_KEYS_STORE, DEDUP_MASK_STORE)) + (
    MEDIA_DIR_PREFIX,
)


def store_op_dir_name(store: str, op_index: int, op_name: str) -> str:
    """A store's folder for one op under checkpoints/: ``checkpoint_op_003_words_num_filter``."""
    return f"{store}_{op_index:03d}_{op_name}"


def failed_file(op_index: int, op_name: str, partition_id: int) -> str:
    """``failed/op_<i>_<op>/partition_<p>.jsonl`` (relative path): the samples op i set aside in one partition."""
    return f"{FAILED_DIR}/{op_dir_name(op_index, op_name)}/{partition_name(partition_id)}.jsonl"


#: Per-row lineage (observe/lineage.py): lineage/partition_<p>/op_<i>.parquet, one file per partition and
#: checkpoint point, holding what the ops since the previous one did to which input rows.
LINEAGE_DIR = "lineage"


def lineage_file(partition_id: int, op_index: int) -> str:
    """The lineage chunk of ``partition_id`` that ends at op ``op_index``'s commit (relative path)."""
    return f"{LINEAGE_DIR}/{partition_name(partition_id)}/op_{op_index:03d}.parquet"


#: What each running partition is doing, rewritten at a fixed interval (jobdir/heartbeat.py): what the
#: watchdog (execution/watchdog.py) reads to tell a hung partition from a slow one.
HEARTBEATS_DIR = "heartbeats"


def heartbeat_file(partition_id: int) -> str:
    """``heartbeats/partition_<p>.json`` (relative path): the latest heartbeat of partition ``partition_id``."""
    return f"{HEARTBEATS_DIR}/{partition_name(partition_id)}.json"


#: A sharded global step (execution/global_shards.py): per global op, its scatter files (one per partition,
#: its keys split by shard), each key shard's duplicate edges by node shard, and the connected components'
#: rounds; a folder per op and partition set (its digest), so a plan never reads another plan's files.
GLOBAL_SHARDS_DIR = "global_shards"


def global_shards_dir(op_index: int, digest: str) -> str:
    """``global_shards/op_<i>_<digest>`` (relative path): the sharded step of op ``op_index`` over one
    partition set."""
    return f"{GLOBAL_SHARDS_DIR}/op_{op_index:03d}_{digest}"


def shard_scatter_file(partition_index: int) -> str:
    """Relative to :func:`global_shards_dir`: partition ``partition_index``'s items, one batch per key shard."""
    return f"scatter/part_{partition_index:05d}.arrow"


def shard_local_edges_file(partition_index: int) -> str:
    """Relative to :func:`global_shards_dir`: partition ``partition_index``'s duplicates of an earlier row of
    the same partition (its scatter task combines them, so a key repeated a million times in a partition
    sends one item to its shard)."""
    return f"scatter/local_{partition_index:05d}.arrow"


def shard_edges_file(key_shard: int, node_shard: int) -> str:
    """Relative to :func:`global_shards_dir`: key shard ``key_shard``'s duplicate edges whose row lies in
    node shard ``node_shard``."""
    return f"edges/key_{key_shard:04d}/node_{node_shard:04d}.arrow"


def shard_done_file(key_shard: int) -> str:
    """Relative to :func:`global_shards_dir`: written last by key shard ``key_shard``: its edges are complete."""
    return f"edges/key_{key_shard:04d}/done.json"


def shard_partner_requests_file(partition_index: int) -> str:
    """Relative to :func:`global_shards_dir`: partition ``partition_index``'s removed rows and their
    representatives, one batch per node shard of the representative (lineage's look-up of partners)."""
    return f"partners/requests/part_{partition_index:05d}.arrow"


def shard_partner_answers_file(node_shard: int) -> str:
    """Relative to :func:`global_shards_dir`: what node shard ``node_shard``'s partitions hold of the
    representatives asked of them (their input rows, MinHash's bands), once each, sorted by position."""
    return f"partners/answers/node_{node_shard:04d}.arrow"


SHARD_COMPONENTS_DIR = "components"
SHARD_PLAN = "shard_plan.json"


#: Ray Jobs mode (jobdir/ray_jobs.py): per execution group of a segment, the Ray Job submissions that ran
#: it, written by their drivers on the cluster (state transitions, results), read by the submitter to reattach.
RAY_JOBS_DIR = "ray_jobs"


def ray_job_record(segment_index: int, group_id: int) -> str:
    """``ray_jobs/seg<k>_group<g>.json`` (relative path): the Ray Job submissions of one group of one segment."""
    return f"{RAY_JOBS_DIR}/seg{segment_index}_group{group_id}.json"


def ray_job_record_key(name: str) -> tuple[int, int] | None:
    """(segment, group) of a file name under ``ray_jobs/`` written by :func:`ray_job_record`; None for
    any other name (a temporary file of an atomic write, say)."""
    stem, _, ext = name.partition(".")
    seg, sep, group = stem.partition("_group")
    if ext != "json" or not sep or not seg.startswith("seg") or not seg[3:].isdigit() or not group.isdigit():
        return None
    return int(seg[3:]), int(group)


def ray_job_global_record(op_index: int) -> str:
    """``ray_jobs/global_op<i>.json`` (relative path): the Ray Job submissions of global op ``op_index``'s step."""
    return f"{RAY_JOBS_DIR}/global_op{op_index}.json"


def ray_job_global_record_key(name: str) -> int | None:
    """The op index of a file name under ``ray_jobs/`` written by :func:`ray_job_global_record`; None for
    any other name."""
    stem, _, ext = name.partition(".")
    if ext != "json" or not stem.startswith("global_op") or not stem[9:].isdigit():
        return None
    return int(stem[9:])


#: Ray Jobs mode: the Ray Job submissions of the job's export step (engine/runner/export_job.py).
RAY_JOB_EXPORT_RECORD = f"{RAY_JOBS_DIR}/export.json"


#: Human-readable progress logs (jobdir/progress_log.py): logs/partition_NNNNN.log and logs/job.log.
LOGS_DIR = "logs"
JOB_LOG = "job.log"


def cli_run_log(stamp: str, pid: int) -> str:
    """``logs/dj-airflow-run_<UTC time>_<pid>.log`` (relative path): the full log of one ``dj-airflow run``
    whose terminal shows the progress display instead (cli/run_output.py); one file per invocation."""
    return f"{LOGS_DIR}/dj-airflow-run_{stamp}_{pid}.log"


#: Event log files: events_<writer>.jsonl at the top of the job directory (jobdir/events.py).
EVENTS_PREFIX = "events_"
#: The tracer's samples (observe/tracer.py): per-partition parts, merged files and the report.
TRACE_DIR = "trace"
TRACE_PARTS_DIR = "parts"
TRACE_REPORT = "trace_report.json"
#: Parallel export: one serialized part per partition before concatenation (output/parts.py).
EXPORT_PARTS_DIR = "export_parts"
#: Expensive ops' batch cursors (execution/batch_cursor.py).
BATCHES_DIR = "batches"
CURSOR_FILE = "cursor.json"
#: The GPU preflight's report and cache (gpu/report.py).
GPU_PROBE_REPORT = "gpu_probe_results.json"
#: Fault injection for tests and drills (jobdir/faults.py).
FAULT_FILE = "_fault_injection.json"
FAULT_FIRED_DIR = "_fault_injection.fired"
#: llm_api_mapper's record of paid calls.  Owned by the op (ops/llm/call_record.py, which may not import
#: the engine); named here so the layout is complete, and a unit test keeps the two equal.
LLM_CALLS_DIR = "llm_calls"

#: Reuse across jobs (storage/reuse_index.py): the work-dir-level index of committed checkpoints,
#: one small file per (partition content, op chain, format) key; and, in the job that reuses them,
#: one pin file per source job (what `dj-airflow gc` must keep).
REUSE_INDEX_DIR = "_reuse/index"
REUSE_GC_LOCK = "_reuse/gc.lock"
REUSE_PINS_DIR = "metadata/reused_from"
#: Planning's row index and partition hashes of unchanged input files (input/index_cache.py).
INPUT_INDEX_CACHE_DIR = "_reuse/input_index"
#: A new job's input planned by a Ray Job before its job directory exists (engine/runner/plan_job.py):
#: ``<job_id>.json`` under it, read by the validate task that submitted the Ray Job, then removed; a
#: resumed job's input proof likewise, ``<job_id>.proof.json``.
PLANNED_INPUT_DIR = "_planning"


#: Per project (recipe ``project_name``), the latest completed job in this work dir (job/project_index.py):
#: what the review gate compares a job with, without reading every job's summary.
PROJECTS_DIR = "_projects"


def latest_completed_file(work_dir: str, project_name: str) -> str:
    """``_projects/<project>/latest_completed.json``; the project name made safe for a path (characters
    outside ``[A-Za-z0-9._-]`` become ``_``) plus a short hash of it, so two names never share a file."""
    import hashlib
    import re

    safe = re.sub(r"[^A-Za-z0-9._-]", "_", project_name)[:80]
    digest = hashlib.sha1(project_name.encode()).hexdigest()[:8]
    return storage.join(work_dir, PROJECTS_DIR, f"{safe}-{digest}", "latest_completed.json")


def reuse_index_dir(work_dir: str) -> str:
    return storage.join(work_dir, *REUSE_INDEX_DIR.split("/"))


def input_index_cache_dir(work_dir: str) -> str:
    return storage.join(work_dir, *INPUT_INDEX_CACHE_DIR.split("/"))


def planned_input_file(work_dir: str, job_id: str) -> str:
    return storage.join(work_dir, *PLANNED_INPUT_DIR.split("/"), f"{job_id}.json")


def input_proof_file(work_dir: str, job_id: str) -> str:
    """A resumed job's input proven unchanged by a Ray Job (engine/runner/plan_job.py), beside the plans."""
    return storage.join(work_dir, *PLANNED_INPUT_DIR.split("/"), f"{job_id}.proof.json")


def reuse_gc_lock(work_dir: str) -> str:
    return storage.join(work_dir, *REUSE_GC_LOCK.split("/"))


@dataclass
class JobPaths:
    work_dir: str
    job_id: str

    @property
    def job_dir(self) -> str:
        return storage.join(self.work_dir, self.job_id)

    def path(self, rel: str) -> str:
        return storage.join(self.job_dir, *rel.split("/"))


def write_json(path: str, obj) -> None:
    storage.atomic_write_bytes(path, json.dumps(obj, indent=2, default=str, ensure_ascii=False).encode())


def read_json(path: str):
    return loads_json(storage.read_bytes(path))


def loads_json(data: bytes):
    """JSON text as written by ``json.dumps`` here: orjson first (several times faster: the job view
    reads a marker per partition and about ten events per partition on every page), the standard
    library for what orjson refuses but ``json.dumps`` writes (NaN, Infinity, integers past 64 bits).
    Raises ValueError when neither reads it."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)
