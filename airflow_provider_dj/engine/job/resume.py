"""Strict resume: prove a job directory may be continued, or refuse without touching it.

Six steps, in order, each logged and recorded as a ``validation_step`` event:

1. locate the job directory and its metadata;
2. compare the current effective recipe with the one the job started with —
   keys that change results refuse, others are accepted and listed;
3. load the saved partitioning (count, boundaries, hashes, algorithm) and
   check it is well formed and unchanged since planning (its checksum);
4. recreate the partitions at the saved boundaries over today's input (same
   files, same sizes, same row layout);
5. re-hash every partition's full content;
6. report which checkpoints are already complete, so downstream tasks only
   do unfinished work.

A refusal raises ``ResumeRefusedError`` with a ``reason`` code and a message
that names what differs.  Validation only reads: its events are buffered and
written only once every step has passed, so a refused job directory is
byte-for-byte what it was (invariant 7).
"""

from __future__ import annotations

import json
import logging
import posixpath
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from airflow_provider_dj import settings
from airflow_provider_dj.core import fs as storage
from airflow_provider_dj.core.errors import RefusedError
from airflow_provider_dj.engine.input import hashing, media
from airflow_provider_dj.engine.input.indexing import index_inputs
from airflow_provider_dj.engine.input.media_digests import FILE_DIGESTS, read_file_digests
from airflow_provider_dj.engine.input.partitioning import (
    READABLE_PARTITIONING_INFO_VERSIONS,
    algorithm_for,
    hash_partition,
)
from airflow_provider_dj.engine.input.sources import InputError, list_input_files
from airflow_provider_dj.engine.input.task_map import RunTasks, run_on_threads
from airflow_provider_dj.engine.jobdir.integrity import CHECKSUM_KEY, json_seal_problem
from airflow_provider_dj.engine.jobdir.layout import EFFECTIVE_CONFIG, JOB_SUMMARY, PARTITIONING_INFO, read_json
from airflow_provider_dj.engine.storage.checkpoints import CheckpointStore, StorageFormat
from airflow_provider_dj.engine.storage.resume_point import last_committed_checkpoint

log = logging.getLogger(__name__)

# Keys whose change alters which rows a job produces, or their content.
RESULT_KEYS = (
    "dataset_path",
    "process",
    "text_keys",
    "skip_op_error",
    "keep_stats_in_res_ds",
    "executor_type",
    # the fields whose media files the partition hashes cover (engine/input/media.py)
    "image_key",
    "audio_key",
    "video_key",
)
# Keys that may change between the original run and a resume.  Partitioning
# keys are accepted because the saved boundaries are always reused;
# checkpoint and storage keys because every checkpoint records its own
# format and pipeline fingerprint.
NON_RESULT_KEYS = (
    "project_name",
    "export_path",
    "np",
    "job_id",
    "resume",
    "schedule",
    "partition",
    "checkpoint",
    "intermediate_storage",
    "tracer",
    "ignored_keys",
    "source_file",
    "work_dir",
    "max_failed_ratio",  # the failure-rate guard: raising it and resuming is its purpose
    "export_in_parallel",  # how the export is serialized, not what it holds (same bytes)
    "settings",  # on-disk settings (delta checkpoints): each checkpoint records its own format
    "review",  # the review gate's bounds: a rejected job is resumed with a fixed recipe (docs/review_gate.md)
    "templates",  # how templated values were rendered (the rendered values are compared themselves)
)

#: Templated keys a resume must render exactly as the job did (engine/config/templates.py).
SAME_RENDERING_KEYS = ("dataset_path", "export_path", "work_dir")


_CORRUPT_INFO_TODO = (
    "Its partition boundaries and hashes are what every checkpoint is checked against, so the "
    "job is not resumed on it: restore the file from a backup, or start a new job. Nothing in "
    "the job directory was changed or deleted."
)


class ResumeRefusedError(RefusedError, RuntimeError):
    """Continuing this job would be wrong; nothing in the job directory was changed."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason

    def __reduce__(self):  # errors cross process boundaries (Ray, the local process pool)
        return (type(self), (self.reason, str(self)))


@dataclass
class ResumeReport:
    job_dir: str
    num_partitions: int
    accepted_changes: list[str]
    completed: dict[int, dict]  # partition id -> {"last_op": i or -1, "final": bool}
    job_complete: bool
    info: dict = field(default_factory=dict)  # the verified partitioning_info
    hashed_bytes: int = 0
    hash_seconds: float = 0.0
    events: list[dict] = field(default_factory=list)


def _flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(d, dict):
        out: dict[str, Any] = {}
        for k, v in d.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: d}


def config_diff(old: dict, new: dict) -> tuple[list[str], list[str]]:
    """(result-affecting changes, accepted changes) as readable 'key: old -> new' lines."""
    old, new = _split_engine_op_args(old), _split_engine_op_args(new)
    fo, fn = _flatten(old), _flatten(new)
    refused: list[str] = []
    accepted: list[str] = []
    for key in sorted(set(fo) | set(fn)):
        if key in ("job_id", "resume"):  # identity, not configuration
            continue
        a, b = fo.get(key, "<absent>"), fn.get(key, "<absent>")
        if json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str):
            continue
        top = key.split(".", 1)[0]
        line = f"  {key}: {json.dumps(a, default=str)} -> {json.dumps(b, default=str)}"
        (refused if top in RESULT_KEYS or top not in NON_RESULT_KEYS else accepted).append(line)
    return refused, accepted


def _split_engine_op_args(cfg: dict) -> dict:
    """``cfg`` with engine-only op arguments (``max_failed_ratio``) moved out of ``process`` into their
    own non-result key, so changing one is an accepted change, not a changed op chain."""
    from airflow_provider_dj.ops.base import ENGINE_OP_ARGS

    if not isinstance(cfg.get("process"), list):
        return cfg
    process, moved = [], {}
    for i, item in enumerate(cfg["process"]):
        if isinstance(item, dict) and len(item) == 1:
            ((name, args),) = item.items()
            if isinstance(args, dict):
                moved.update({f"process[{i}].{name}.{k}": v for k, v in args.items() if k in ENGINE_OP_ARGS})
                item = {name: {k: v for k, v in args.items() if k not in ENGINE_OP_ARGS}}
        process.append(item)
    return dict(cfg, process=process, max_failed_ratio={"job": cfg.get("max_failed_ratio"), **moved})


def check_same_rendering(old: dict | None, new: dict | None) -> None:
    """A templated path the job rendered one way and this run renders another (a resume from a run of
    another logical date) refuses: the job would read another day's input or overwrite another day's
    export.  A retry or a clear of the job's own run renders the same values and passes."""
    from airflow_provider_dj.engine.config.templates import rendered_differences

    lines = rendered_differences(old, new, SAME_RENDERING_KEYS)
    if not lines:
        return
    was, now = (old or {}).get("logical_date"), (new or {}).get("logical_date")
    raise ResumeRefusedError(
        "template_rendered_differently",
        f"the job rendered its templated paths for logical date {was}, this run (logical date {now}) renders "
        "them differently:\n"
        + "\n".join(lines)
        + f"\nResume it with the job's own logical date: clear the failed tasks of its DAG run, or "
        f"dj-airflow run --resume <job id> --logical-date {was}; or give the paths explicitly in the "
        "trigger's conf (export_path, dataset_path). Nothing in the job directory was changed.",
    )


def _check_boundaries(info: dict) -> None:
    parts = info.get("partitions")
    total = info.get("total_rows")
    if not isinstance(parts, list) or not isinstance(total, int) or isinstance(total, bool):
        raise ResumeRefusedError(
            "metadata_outdated", f"{posixpath.basename(PARTITIONING_INFO)} has no partition list or total_rows"
        )
    expected_start = 0
    for i, p in enumerate(parts):
        for key in ("start_row", "end_row", "num_rows", "partition_id"):
            v = p.get(key)
            if not isinstance(v, int) or isinstance(v, bool):
                raise ResumeRefusedError("boundaries_invalid", f"partition {i}: {key}={v!r} is not an integer")
        if not p.get("content_hash"):
            raise ResumeRefusedError(
                "metadata_outdated",
                f"partition {i} has no content hash: written by a version without full-content hashes; start a new job",
            )
        if p["partition_id"] != i:
            raise ResumeRefusedError(
                "boundaries_invalid", f"partition {i} is recorded as partition {p['partition_id']}"
            )
        if p["start_row"] != expected_start:
            kind = "gap" if p["start_row"] > expected_start else "overlap"
            raise ResumeRefusedError(
                "boundaries_invalid",
                f"partition {i} starts at row {p['start_row']} but the previous one ends at {expected_start} ({kind})",
            )
        if p["end_row"] <= p["start_row"] or p["num_rows"] != p["end_row"] - p["start_row"]:
            raise ResumeRefusedError(
                "boundaries_invalid",
                f"partition {i}: rows {p['start_row']}-{p['end_row']} "
                f"with num_rows={p['num_rows']} is empty or inconsistent",
            )
        expected_start = p["end_row"]
    if expected_start != total:
        raise ResumeRefusedError(
            "boundaries_invalid", f"partitions cover rows 0-{expected_start} but the job recorded {total} input rows"
        )


#: ``(saved partitioning_info, dataset_path, job_dir) -> bytes hashed``: steps 4 and 5 of a resume, the
#: input proven to be the one the job was planned on, wherever that proof runs; raises ResumeRefusedError.
InputProof = Callable[[dict, str, str], int]


def prove_input(
    info: dict, dataset_path: str, run_tasks: RunTasks = run_on_threads, *, job_dir: str | None = None
) -> int:
    """Steps 4 and 5 by tasks over ``run_tasks``: the files and their rows as recorded, every partition's
    content hash as recorded; return the bytes hashed.  Raises ResumeRefusedError.  ``job_dir``: where
    the media files' recorded digests are read from, to name a changed one (engine/input/media_digests.py)."""
    _compare_inputs(info, dataset_path, run_tasks)
    return _verify_partition_hashes(info, run_tasks, job_dir=job_dir)


def _compare_inputs(saved: dict, dataset_path: str, run_tasks: RunTasks = run_on_threads) -> None:
    """Step 4: today's files and row layout must be the ones the boundaries were cut on."""
    try:
        files = list_input_files(dataset_path)
    except InputError as exc:
        raise ResumeRefusedError("input_changed", f"the input is gone or unreadable: {exc}") from exc
    old = [(f["path"], f["size"]) for f in saved["input_files"]]
    new = [(f.path, f.size) for f in files]
    old_names, new_names = [p for p, _ in old], [p for p, _ in new]
    if old_names != new_names:
        added = sorted(set(new_names) - set(old_names))
        removed = sorted(set(old_names) - set(new_names))
        detail = "; ".join(x for x in (f"added {added}" if added else "", f"missing {removed}" if removed else "") if x)
        raise ResumeRefusedError(
            "input_changed", f"the input files changed since the job started ({detail or 'order changed'})"
        )
    for (path, a), (_, b) in zip(old, new):
        if a != b:
            raise ResumeRefusedError(
                "input_changed",
                f"{path} changed size ({a} -> {b} bytes): rows were appended, removed or edited since the job started",
            )
    if algorithm_for(files) != saved["algorithm"]:
        raise ResumeRefusedError(
            "algorithm_changed",
            f"the job's hash algorithm is {saved['algorithm']!r} but this input hashes with {algorithm_for(files)!r}",
        )
    index_inputs(files, run_tasks)
    for f, sf in zip(files, saved["input_files"]):
        if f.num_rows != sf["num_rows"]:
            raise ResumeRefusedError(
                "input_changed", f"{f.path} has {f.num_rows} rows, the job recorded {sf['num_rows']}"
            )


def completed_checkpoints(job_dir: str, info: dict, plan) -> dict[int, dict]:
    """Per partition: the highest op index with a committed checkpoint (-1 if none), and whether it is final.

    The same search the segment runner resumes with (``engine.storage.resume_point``), on markers only."""
    st = CheckpointStore(job_dir, StorageFormat())
    out: dict[int, dict] = {}
    final = plan.final_op_index
    for p in info["partitions"]:
        last = last_committed_checkpoint(st, plan, p["partition_id"], p["content_hash"])
        out[p["partition_id"]] = {"last_op": last, "final": last == final}
    return out


def validate_resume(
    recipe,
    job_dir: str,
    plan,
    *,
    log_step: Callable[[str], None] | None = None,
    input_proof: InputProof | None = None,
) -> ResumeReport:
    """The six steps that prove a job directory may be continued (module docstring); the job directory
    is only read.  ``input_proof`` runs steps 4 and 5 elsewhere (a Ray Job on the cluster,
    operators/input_planning.py); by default they run here, on this machine's threads."""
    say = log_step or log.info
    events: list[dict] = []

    def step(n: int, name: str, **fields) -> None:
        msg = f"resume validation step {n}/6 ({name}): ok" + (f" — {fields['detail']}" if fields.get("detail") else "")
        say(msg)
        events.append(
            {
                "event_type": "validation_step",
                "timestamp": time.time(),
                "step": n,
                "name": name,
                "status": "ok",
                **fields,
            }
        )

    # 1. locate
    _check_job_located(job_dir)
    step(1, "locate", detail=job_dir)

    # 2. config
    accepted = _check_config_unchanged(recipe, job_dir)
    step(
        2,
        "config_matches",
        detail=f"{len(accepted)} accepted non-result changes" if accepted else "identical",
        accepted_changes=accepted,
    )
    for line in accepted:
        say(f"accepted change (does not affect results):{line}")

    # 3. saved partitioning (its checksum: engine/jobdir/integrity.py)
    info, sealed = load_saved_partitioning(job_dir)
    step(
        3,
        "load_partitioning",
        detail=f"{len(info['partitions'])} partitions over {info['total_rows']} rows"
        + ("" if sealed else " (version 1, written before checksums: not verified)"),
    )

    # 4. recreate partitions at the saved boundaries; 5. full-content hashes
    t0 = time.perf_counter()
    if input_proof is None:
        _compare_inputs(info, recipe.dataset_path)
        step(4, "recreate_partitions", detail=f"{len(info['input_files'])} input files unchanged")
        t0 = time.perf_counter()
        nbytes = _verify_partition_hashes(info, job_dir=job_dir)
    else:
        nbytes = input_proof(info, recipe.dataset_path, job_dir)
        step(4, "recreate_partitions", detail=f"{len(info['input_files'])} input files unchanged")
    secs = time.perf_counter() - t0
    step(
        5,
        "verify_hashes",
        detail=f"{len(info['partitions'])} partitions, {nbytes / 1e6:.1f} MB in {secs:.2f}s",
        hashed_bytes=nbytes,
        duration=round(secs, 6),
    )

    # 6. completed work
    done = completed_checkpoints(job_dir, info, plan)
    n_final = sum(1 for d in done.values() if d["final"])
    summary_path = storage.join(job_dir, JOB_SUMMARY)
    complete = storage.exists(summary_path) and read_json(summary_path).get("status") == "completed"
    step(
        6,
        "completed_checkpoints",
        detail=f"{n_final}/{len(done)} partitions final" + ("; job already completed" if complete else ""),
        completed={str(k): v for k, v in done.items()},
    )
    return ResumeReport(job_dir, len(info["partitions"]), accepted, done, complete, info, nbytes, secs, events)


def _check_job_located(job_dir: str) -> None:
    """Step 1: the job directory holds its effective config and partitioning; else metadata_missing."""
    missing = [
        rel
        for rel in (EFFECTIVE_CONFIG, PARTITIONING_INFO)
        if not storage.exists(storage.join(job_dir, *rel.split("/")))
    ]
    if missing:
        raise ResumeRefusedError(
            "metadata_missing",
            f"job directory {job_dir} lacks {', '.join(missing)}: "
            f"check the resume token and work_dir, or start a new job",
        )


def _check_config_unchanged(recipe, job_dir: str) -> list[str]:
    """Step 2: the recipe renders as the job did and changed in no key that affects results; return
    the accepted (non-result) changes.  Raises ResumeRefusedError (config_changed) listing the others."""
    old_cfg = read_json(storage.join(job_dir, *EFFECTIVE_CONFIG.split("/")))
    new_cfg = recipe.to_dict()
    check_same_rendering(old_cfg.get("templates"), new_cfg.get("templates"))
    if "settings" in old_cfg:  # a job dir from before the key was recorded has nothing to compare
        new_cfg["settings"] = settings.on_disk()
    refused, accepted = config_diff(old_cfg, new_cfg)
    if refused:
        raise ResumeRefusedError(
            "config_changed",
            "the recipe changed in keys that affect results:\n"
            + "\n".join(refused)
            + "\nRevert them to resume, or start a new job.",
        )
    return accepted


def load_saved_partitioning(job_dir: str) -> tuple[dict, bool]:
    """Step 3: the saved partitioning document, checked; return (it, whether it carries a checksum).

    Raises ResumeRefusedError: metadata_corrupt, metadata_outdated or algorithm_changed, or what
    the boundary check finds."""
    info_path = storage.join(job_dir, *PARTITIONING_INFO.split("/"))
    try:
        info = read_json(info_path)
    except ValueError as exc:
        raise ResumeRefusedError(
            "metadata_corrupt",
            f"{info_path} is not valid JSON ({exc}): it was damaged after it was written. {_CORRUPT_INFO_TODO}",
        ) from exc
    if not isinstance(info, dict):
        raise ResumeRefusedError(
            "metadata_corrupt",
            f"{info_path} holds a JSON {type(info).__name__}, not the partitioning document. {_CORRUPT_INFO_TODO}",
        )
    if (
        info.get("version") not in READABLE_PARTITIONING_INFO_VERSIONS
        or "partitions" not in info
        or "input_files" not in info
    ):
        raise ResumeRefusedError(
            "metadata_outdated",
            f"{posixpath.basename(PARTITIONING_INFO)} (version {info.get('version')!r}) was "
            f"written by a version without row boundaries or hashes; start a new job",
        )
    if info.get("algorithm") not in hashing.KNOWN_ALGORITHMS:
        raise ResumeRefusedError(
            "algorithm_changed",
            f"partitions were hashed with {info.get('algorithm')!r}, which "
            f"this version does not know (known: {', '.join(hashing.KNOWN_ALGORITHMS)})",
        )
    _check_boundaries(info)
    # After the structural checks (they say *what* is wrong), the checksum catches every other change: a
    # flipped digit in a content hash or a byte count must not be mistaken for an edited input.
    sealed = info.get("version", 0) >= 2 or CHECKSUM_KEY in info
    problem = json_seal_problem(info) if sealed else None
    if problem:
        raise ResumeRefusedError("metadata_corrupt", f"{info_path}: {problem}. {_CORRUPT_INFO_TODO}")
    return info, sealed


def _verify_partition_hashes(info: dict, run_tasks: RunTasks = run_on_threads, *, job_dir: str | None = None) -> int:
    """Step 5: every partition's full content hashes as recorded (a task per partition, on this machine's
    cores); return the bytes hashed.  Raises ResumeRefusedError (hash_mismatch) naming the first
    partition that differs, and the media file when its rows are unchanged but a file they name is not
    (engine/input/media.py; a job planned before media were hashed records no ``media_keys``: rows only)."""
    parts = info["partitions"]
    keys = info.get("media_keys")
    tasks = [(info["algorithm"], info["input_files"], p["segments"], keys) for p in parts]
    try:
        results = run_tasks(hash_partition, tasks)
    except InputError as exc:  # a media file a row names is gone or unreadable (engine/input/media.py)
        raise ResumeRefusedError("hash_mismatch", f"the input cannot be read as it was planned: {exc}") from exc
    for p, (digest, _, named) in zip(parts, results):
        if digest != p["content_hash"]:
            rows_same = named is not None and named["rows_hash"] == p.get("rows_hash")
            what = (
                media.changed_media(
                    _recorded_file_digests(job_dir, p), media.PartitionMedia("", named["media"]["file_digests"], 0)
                )
                if rows_same
                else "the input was edited or reordered since the job started"
            )
            raise ResumeRefusedError(
                "hash_mismatch",
                f"partition {p['partition_id']} (rows {p['start_row']}-"
                f"{p['end_row'] - 1}) does not match its recorded content hash: {what}",
            )
    return sum(n for _, n, _ in results)


def _recorded_file_digests(job_dir: str | None, partition: dict) -> dict[str, str]:
    """The media files' digests planning recorded for ``partition`` (empty when they cannot be read)."""
    if job_dir is None:
        return dict(((partition.get("media") or {}).get(FILE_DIGESTS)) or {})
    return read_file_digests(job_dir, partition) or {}
