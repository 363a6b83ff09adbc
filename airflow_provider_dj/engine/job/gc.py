"""``dj-airflow gc``: the retention policy of a work dir whose jobs reuse each other's checkpoints.

A nightly work dir grows by one job a night; with reuse across jobs (engine/execution/reuse.py)
tonight's job reads last night's checkpoints in place.  gc deletes the checkpoints of old completed
jobs and the index entries that point at them, and never deletes what a job still needs:

* a **running** job (its runner lock is held and not stale, engine/jobdir/lock.py),
* a **resumable** job: failed, stopped, or killed (no completed summary) — its checkpoints are its
  resume state (invariant 7),
* the **newest** ``keep_last_n_jobs`` completed jobs,
* every job whose checkpoints a kept job references (its pins, ``metadata/reused_from/``), and
  the jobs those reference in turn.

With a size budget (``max_bytes``), older kept completed jobs that nothing kept references are
dropped too, oldest first, until the kept checkpoints fit; the newest completed job always stays
(it is what the next night reuses).  Only checkpoint data goes
(``checkpoints/checkpoint_op_*``, ``dedup_keys_op_*``, ``dedup_mask_op_*``); the summary, events,
``partitioning_info.json``, ``failed/`` samples and the export stay.  Decisions and deletions run
under the exclusive gc lock, against which jobs write their pins (``reuse_index.gc_guard``).
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field

from airflow_provider_dj.core import fs as storage
from airflow_provider_dj.engine.jobdir import lock as job_lock
from airflow_provider_dj.engine.jobdir.layout import (
    CHECKPOINTS_DIR,
    EFFECTIVE_CONFIG,
    JOB_SUMMARY,
    PARTITIONING_INFO,
    STATE_DIR_PREFIXES,
)
from airflow_provider_dj.engine.storage.reuse_index import ReuseIndex, gc_guard, pinned_sources

log = logging.getLogger(__name__)


@dataclass
class JobEntry:
    job_id: str
    job_dir: str
    status: str  # completed | failed | stopped | running | unfinished
    running: bool
    ended_at: float
    checkpoint_bytes: int
    pins: set[str] = field(default_factory=set)

    @property
    def resumable(self) -> bool:
        return self.status != "completed"


@dataclass
class GcResult:
    deleted: list[dict]
    kept: list[dict]
    freed_bytes: int
    index_entries_removed: int
    dry_run: bool

    def to_dict(self) -> dict:
        return self.__dict__.copy()


def _tree_bytes(path: str) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(root, name))
            except OSError:
                pass
    return total


def _state_dirs(job_dir: str) -> list[str]:
    root = storage.join(job_dir, CHECKPOINTS_DIR)
    return [storage.join(root, d) for d in storage.listdir(root) if d.startswith(STATE_DIR_PREFIXES)]


def list_jobs(work_dir: str) -> list[JobEntry]:
    """Every planned job in ``work_dir`` with what gc needs to know about it."""
    jobs = []
    for name in storage.listdir(work_dir):
        if name.startswith(("_", ".")):
            continue
        job_dir = storage.join(work_dir, name)
        if not (
            storage.exists(storage.join(job_dir, *PARTITIONING_INFO.split("/")))
            or storage.exists(storage.join(job_dir, *EFFECTIVE_CONFIG.split("/")))
        ):
            continue
        try:
            summary = json.loads(storage.read_bytes(storage.join(job_dir, JOB_SUMMARY)))
        except (FileNotFoundError, ValueError, OSError):
            summary = {}
        lock = job_lock.read_lock(job_dir)
        running = lock is not None and bool(lock) and not job_lock.is_stale(lock)[0]
        status = summary.get("status") or "unfinished"
        ended = float(summary.get("end_time") or 0) or _mtime(job_dir)
        jobs.append(
            JobEntry(
                job_id=name,
                job_dir=job_dir,
                status=status,
                running=running,
                ended_at=ended,
                checkpoint_bytes=sum(_tree_bytes(d) for d in _state_dirs(job_dir))
                if not storage.is_url(job_dir)
                else 0,
                pins=pinned_sources(job_dir),
            )
        )
    return jobs


def _mtime(path: str) -> float:
    try:
        return os.path.getmtime(path)
    except OSError:
        return 0.0


def _closure(roots: set[str], by_id: dict[str, JobEntry]) -> set[str]:
    kept, todo = set(), list(roots)
    while todo:
        jid = todo.pop()
        if jid in kept or jid not in by_id:
            continue
        kept.add(jid)
        todo.extend(by_id[jid].pins)
    return kept


def choose_kept(jobs: list[JobEntry], keep_last_n_jobs: int | None, max_bytes: int | None) -> set[str]:
    """The job ids whose checkpoints stay (see the module docstring for the rules)."""
    by_id = {j.job_id: j for j in jobs}
    must = {j.job_id for j in jobs if j.running or j.resumable}
    completed = sorted((j for j in jobs if not j.running and not j.resumable), key=lambda j: -j.ended_at)
    newest = completed if keep_last_n_jobs is None else completed[: max(0, keep_last_n_jobs)]
    chosen = must | {j.job_id for j in newest}
    kept = _closure(chosen, by_id)
    if max_bytes is not None:
        # Oldest first, never the newest completed job (tomorrow's reuse source); a job that a kept job
        # references waits until that one goes, so go round until nothing more can be dropped.
        changed = True
        while changed and sum(by_id[k].checkpoint_bytes for k in kept) > max_bytes:
            changed = False
            for j in reversed(newest[1:]):
                if j.job_id not in chosen or sum(by_id[k].checkpoint_bytes for k in kept) <= max_bytes:
                    continue
                trial = _closure(chosen - {j.job_id}, by_id)
                if j.job_id not in trial:  # nothing kept references it
                    chosen.discard(j.job_id)
                    kept, changed = trial, True
    return kept


def collect(
    work_dir: str, *, keep_last_n_jobs: int | None = None, max_bytes: int | None = None, dry_run: bool = False
) -> GcResult:
    """Apply the retention policy to ``work_dir``; with ``dry_run`` only say what would go."""
    with gc_guard(work_dir, exclusive=True):
        jobs = list_jobs(work_dir)
        kept = choose_kept(jobs, keep_last_n_jobs, max_bytes)
        doomed = [j for j in jobs if j.job_id not in kept and _state_dirs(j.job_dir)]
        deleted, freed = [], 0
        for j in doomed:
            deleted.append({"job_id": j.job_id, "status": j.status, "bytes": j.checkpoint_bytes})
            freed += j.checkpoint_bytes
            if not dry_run:
                for d in _state_dirs(j.job_dir):
                    storage.remove_tree(d)
        # Entries of deleted jobs, of jobs no longer in the work dir, and of completed jobs without
        # checkpoints (removed by an earlier gc or by their retention policy): they can only miss.
        present = {j.job_id for j in jobs}
        stale = {j.job_id for j in jobs if not j.resumable and not j.running and not _state_dirs(j.job_dir)}
        gone = {d["job_id"] for d in deleted} | stale
        removed = 0
        for path, entry in ReuseIndex(work_dir).entries():
            if not entry or entry.get("job_id") in gone or entry.get("job_id") not in present:
                removed += 1
                if not dry_run:
                    storage.remove(path)
    kept_rows = [
        {
            "job_id": j.job_id,
            "status": j.status,
            "running": j.running,
            "bytes": j.checkpoint_bytes,
            "why": _why(j, kept, jobs),
        }
        for j in jobs
        if j.job_id in kept
    ]
    return GcResult(deleted, kept_rows, freed, removed, dry_run)


def _why(j: JobEntry, kept: set[str], jobs: list[JobEntry]) -> str:
    if j.running:
        return "running"
    if j.resumable:
        return f"resumable ({j.status})"
    users = sorted(o.job_id for o in jobs if o.job_id in kept and j.job_id in o.pins)
    return f"reused by {', '.join(users)}" if users else "recent"
