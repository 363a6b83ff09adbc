"""Has a job reached a point yet, or has it failed?  Read from the job directory alone.

This is what ``CheckpointSensor`` (poke/reschedule) and ``CheckpointTrigger``
(deferrable) both call, so the three modes answer the same question the
same way.  It reads commit markers and events, never task states: a task
marked success by hand without its work done cannot satisfy it, and a DAG
in another Airflow deployment can wait on the same job directory.

Targets:

* ``after_op`` (index or name): every wanted partition has committed the
  state after that op.  A per-partition op counts as done for a partition
  when any checkpoint from that op to the end of its segment is committed
  (the segment's last state is always checkpointed, so this always
  arrives).  A global op (deduplicator) is done when its keep mask for the
  partition is committed.
* ``segment_index``: a segment's output plus the dedup keys the next global
  step needs (the generated DAG's barrier).
* ``wait_for="export"``: ``job_summary.json`` says completed.

A completed job satisfies every target (retention may have removed the
checkpoints by then).  A failed job raises ``JobFailedError`` at once,
naming the partitions and errors, instead of waiting for a timeout.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass, field

from airflow_provider_dj.core import fs as storage
from airflow_provider_dj.core.errors import DJError
from airflow_provider_dj.engine.jobdir.doc_cache import read_partitioning_info
from airflow_provider_dj.engine.jobdir.layout import JOB_SUMMARY, PARTITIONING_INFO
from airflow_provider_dj.engine.storage.context import JobContext


class JobFailedError(DJError, RuntimeError):
    """The job failed; waiting longer cannot help."""

    def __init__(self, message: str, partitions: list[int] | None = None) -> None:
        super().__init__(message)
        self.partitions = partitions or []


class WaitTargetError(DJError, ValueError):
    """The sensor's target does not exist in this job (unknown op, partition ...)."""


@dataclass
class WaitStatus:
    done: bool
    committed: list[int] = field(default_factory=list)
    missing: list[int] = field(default_factory=list)
    message: str = ""

    def to_dict(self) -> dict:
        return {"done": self.done, "committed": self.committed, "missing": self.missing, "message": self.message}


def _summary(job_dir: str) -> dict | None:
    try:
        return json.loads(storage.read_bytes(storage.join(job_dir, JOB_SUMMARY)))
    except FileNotFoundError:
        return None
    except ValueError:
        return None  # being written by a non-atomic writer: look again next time


_RESTARTS = {"partition_start", "partition_complete", "partition_resume"}
_JOB_RESTARTS = {"job_start", "job_complete", "stop_cleared"}


def failures(job_dir: str, events: list[dict] | None = None) -> dict[str, str]:
    """``{"partition <p>" | "job": error}`` for failures not followed by a restart or success.

    A ``partition_failed`` is cleared by a later start/complete of the same
    partition (an Airflow retry picked it up).  A ``job_failed`` — and a
    summary with status failed — is cleared by any later sign of life: a
    ``job_start`` (resume) or any partition starting again, because a
    clear-and-retry of one task in the UI re-runs that task without a new
    ``job_start``.  ``events`` may be passed when the caller has read them already (the job view).
    """
    from airflow_provider_dj.engine.jobdir.events import read_events

    failed: dict[str, str] = {}
    last_restart = 0.0
    for ev in read_events(job_dir) if events is None else events:
        t, pid = ev.get("event_type"), ev.get("partition_id")
        if t == "partition_failed" and pid is not None:
            failed[f"partition {pid}"] = ev.get("error_message") or "failed"
        elif t in _RESTARTS and pid is not None:
            failed.pop(f"partition {pid}", None)
        if t == "job_failed":
            failed["job"] = ev.get("error_message") or "failed"
        elif t in _JOB_RESTARTS or (t in _RESTARTS and t != "partition_complete"):
            failed.pop("job", None)
            last_restart = max(last_restart, float(ev.get("timestamp") or 0))
    summary = _summary(job_dir)
    if summary and summary.get("status") == "failed" and float(summary.get("end_time") or 0) >= last_restart:
        failed["job"] = summary.get("error") or summary.get("error_message") or f"{JOB_SUMMARY}: status failed"
    return failed


def _raise_if_failed(job_dir: str, partitions: list[int] | None) -> None:
    failed = failures(job_dir)
    if partitions is not None:
        failed = {k: v for k, v in failed.items() if k == "job" or int(k.split()[1]) in partitions}
    if failed:
        ids = sorted(int(k.split()[1]) for k in failed if k != "job")
        detail = "; ".join(f"{k}: {v}" for k, v in sorted(failed.items()))
        labels = _grid_labels(job_dir, ids)
        named = f" In Airflow's grid and the Data-Juicer job tab: {', '.join(labels)}." if labels else ""
        raise JobFailedError(
            f"job {storage.basename(job_dir)} failed ({detail}).{named} Clear or retry the failed "
            f"task(s) of the recipe DAG (or resume the job); this wait cannot succeed until then.",
            ids,
        )


def _grid_labels(job_dir: str, ids: list[int]) -> list[str]:
    """``p3 rows 750-999`` for each partition id: the name the mapped task instance and the job view give it."""
    try:
        info = read_partitioning_info(job_dir)
        parts = {p["partition_id"]: p for p in info["partitions"]}
        return [f"p{i} rows {parts[i]['start_row']}-{parts[i]['end_row'] - 1}" for i in ids if i in parts]
    except (FileNotFoundError, ValueError, KeyError, TypeError):
        return []


def resolve_op(plan, after_op: int | str) -> int:
    if isinstance(after_op, bool) or not isinstance(after_op, (int, str)):
        raise WaitTargetError(f"after_op must be an op index or name, got {after_op!r}")
    if isinstance(after_op, str) and after_op.strip().lstrip("-").isdigit():
        after_op = int(after_op)
    if isinstance(after_op, int):
        if not 0 <= after_op < len(plan.ops):
            raise WaitTargetError(f"after_op {after_op} is out of range: the job has ops 0..{len(plan.ops) - 1}")
        return after_op
    matches = [o.index for o in plan.ops if o.name == after_op]
    if not matches:
        names = list(dict.fromkeys(o.name for o in plan.ops))
        close = difflib.get_close_matches(after_op, names, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise WaitTargetError(f"after_op {after_op!r} is not an op of this job.{hint} Ops: {', '.join(names)}")
    if len(matches) > 1:
        raise WaitTargetError(f"after_op {after_op!r} occurs {len(matches)} times (ops {matches}); give its index")
    return matches[0]


def check(
    job_dir: str,
    *,
    after_op: int | str | None = None,
    segment_index: int | None = None,
    wait_for: str | None = None,
    partitions: list[int] | None = None,
) -> WaitStatus:
    """One look at the job directory.  Raises JobFailedError / WaitTargetError."""
    from airflow_provider_dj.engine.storage.checkpoints import CheckpointStore
    from airflow_provider_dj.engine.storage.global_op_state import keys_store, mask_store

    summary = _summary(job_dir)
    if summary and summary.get("status") == "completed":
        return WaitStatus(True, message="job completed")
    _raise_if_failed(job_dir, partitions)
    if wait_for == "export":
        return WaitStatus(False, message="waiting for the job's export (job_summary.json)")
    if not storage.exists(storage.join(job_dir, *PARTITIONING_INFO.split("/"))):
        return WaitStatus(False, message="job not planned yet")
    ctx = JobContext(job_dir)
    plan = ctx.plan
    parts = ctx.partitioning_info["partitions"]
    all_ids = [p["partition_id"] for p in parts]
    wanted = all_ids if partitions is None else list(partitions)
    unknown = sorted(set(wanted) - set(all_ids))
    if unknown:
        raise WaitTargetError(f"partitions {unknown} do not exist: the job has partitions 0..{len(all_ids) - 1}")
    store = CheckpointStore(job_dir, ctx.storage_format)
    by_id = {p["partition_id"]: p for p in parts}

    def committed(st, i: int, pid: int) -> bool:
        o = plan.ops[i]
        return st.is_committed(i, o.name, pid, by_id[pid]["content_hash"], o.fingerprint)

    if segment_index is not None:
        seg = plan.segments[segment_index]
        target, ks = seg.end - 1, keys_store(job_dir)

        def ok(pid: int) -> bool:
            if target >= 0 and not committed(store, target, pid):
                return False
            return seg.keys_for_global is None or committed(ks, seg.keys_for_global, pid)

        what = f"segment {segment_index}"
    else:
        i = resolve_op(plan, after_op)
        op = plan.ops[i]
        what = f"op {i} ({op.name})"
        if op.is_global:
            ms = mask_store(job_dir)

            def ok(pid: int) -> bool:
                return committed(ms, i, pid)
        else:
            seg = next(s for s in plan.segments if i in s.op_indices)
            points = [k for k in plan.checkpoint_points if i <= k < seg.end]

            def ok(pid: int) -> bool:
                return any(committed(store, k, pid) for k in points)

    done, missing = [], []
    for pid in wanted:
        (done if ok(pid) else missing).append(pid)
    msg = f"{what}: {len(done)}/{len(wanted)} partitions committed" + (
        f"; waiting for {missing[:20]}" if missing else ""
    )
    return WaitStatus(not missing, done, missing, msg)
