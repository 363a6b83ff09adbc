"""Ray Jobs mode's state in the job directory: the deterministic submission ids and the groups' records.

A partition group submitted as a Ray Job (engine/runner/group_job.py is its driver) has a submission
id that is a function of the job directory, the segment and the group, and of the attempt: the first
submission is ``dj-<job id>-<job dir hash>-s<k>-g<g>``, a resubmission after a failed or stopped one
appends ``-r<n>``.  So any submitter (a retry, a UI clear, a second worker) computes the same ids and
finds the group's submissions on the cluster instead of starting a duplicate: Ray refuses a second
submission under an id it knows.  The job directory's hash keeps two work dirs that reuse a job id
apart on one cluster.

The record (``layout.ray_job_record``) is written only by the drivers, after their identity and
version checks pass, so a refused submission writes nothing in the job directory.  Each driver
appends its submission (where and when it was submitted: ``dashboard_address``, ``submitted_at``) and
its state transitions (``started`` -> ``succeeded`` | ``failed`` | ``stopped``, with ``stopped_by``:
``stop_request`` for the job's stop protocol, including Ray's ``stop_job`` called by ``dj-airflow stop``,
``stop_job`` for a Ray stop of that one job) and, on success, its partitions' results.  The job view
shows the records and ``dj-airflow stop`` stops the submissions they say are running.  Drivers of one group never run at once (a
submitter resubmits only after the previous one ended), so a read-modify-write by atomic replace is
enough.  A submitter reads the record where the cluster has forgotten a submission (a restarted head).
One write comes from the submitter: after a submission ended without success while the job's stop
request was pending, it records the stop (``stopped_by: stop_request``, ``recorded_by: submitter``)
where the driver was ended before it could (engine/runner/group_job.settle_stopped_group); its driver
has ended by then, so the writers still never overlap.

A global op's step submitted as a Ray Job (engine/runner/global_job.py) has the same scheme under
``dj-<job id>-<job dir hash>-op<i>`` (``-r<n>`` after a failed or stopped attempt) and its own record,
``layout.ray_job_global_record`` (``ray_jobs/global_op<i>.json``), written by its drivers the same way.
:func:`read_records` lists the groups' records only (what the job view's table shows);
The job's export step submitted as a Ray Job (engine/runner/export_job.py) has the same scheme under
``dj-<job id>-<job dir hash>-export`` and its record ``layout.RAY_JOB_EXPORT_RECORD``
(``ray_jobs/export.json``, ``"step": "export"``).
:func:`running_submissions` covers all three, so a job's stop reaches a running global step or export too.
"""

from __future__ import annotations

import re
import time
from typing import Any, Protocol, Sequence

import xxhash

from airflow_provider_dj.core import fs as storage
from airflow_provider_dj.engine.jobdir.layout import (
    RAY_JOB_EXPORT_RECORD,
    RAY_JOBS_DIR,
    ray_job_global_record,
    ray_job_global_record_key,
    ray_job_record,
    ray_job_record_key,
    read_json,
    write_json,
)

#: A driver's states, in the order it passes them; the last three end it.
STATES = ("started", "succeeded", "failed", "stopped")
ENDED = frozenset({"succeeded", "failed", "stopped"})
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")


def _id_prefix(job_dir: str, job_id: str) -> str:
    """``dj-<job id>-<job dir hash>``: what every submission id of one job directory starts with."""
    digest = xxhash.xxh3_64_hexdigest(job_dir.rstrip("/").encode())
    safe = _UNSAFE.sub("_", job_id)[:64]
    return f"dj-{safe}-{digest[:8]}"


def base_submission_id(job_dir: str, job_id: str, segment_index: int, group_id: int) -> str:
    """The first submission's id of one group of one segment of one job directory."""
    return f"{_id_prefix(job_dir, job_id)}-s{int(segment_index)}-g{int(group_id)}"


def global_base_submission_id(job_dir: str, job_id: str, op_index: int) -> str:
    """The first submission's id of global op ``op_index``'s step of one job directory."""
    return f"{_id_prefix(job_dir, job_id)}-op{int(op_index)}"


def export_base_submission_id(job_dir: str, job_id: str) -> str:
    """The first submission's id of the export step of one job directory."""
    return f"{_id_prefix(job_dir, job_id)}-export"


def plan_base_submission_id(job_dir: str, job_id: str, recipe_digest: str) -> str:
    """The first submission's id of planning one job directory's input for one effective recipe (another
    recipe, say other overrides in the run's conf, is planned under other ids)."""
    return f"{_id_prefix(job_dir, job_id)}-plan-{recipe_digest[:8]}"


def proof_base_submission_id(job_dir: str, job_id: str, recipe_digest: str, try_number: int | None) -> str:
    """The first submission's id of proving a resumed job directory's input unchanged, for one try of the
    validate task: every try proves the input afresh (it may have changed since the last one)."""
    return f"{_id_prefix(job_dir, job_id)}-proof-{recipe_digest[:8]}-t{int(try_number or 0)}"


def submission_id(base: str, attempt: int) -> str:
    """Attempt 0 is ``base``; a resubmission after attempt n-1 failed or was stopped is ``base-r<n>``."""
    return base if attempt == 0 else f"{base}-r{int(attempt)}"


def attempt_of(base: str, sid: str) -> int | None:
    """The attempt number of ``sid`` among ``base``'s ids; None when it is not one of them."""
    if sid == base:
        return 0
    m = re.fullmatch(re.escape(base) + r"-r(\d+)", sid)
    return int(m.group(1)) if m else None


def record_path(job_dir: str, segment_index: int, group_id: int) -> str:
    return storage.join(job_dir, *ray_job_record(segment_index, group_id).split("/"))


def read_record(job_dir: str, segment_index: int, group_id: int) -> dict | None:
    """The group's record, or None when no driver of it has started."""
    path = record_path(job_dir, segment_index, group_id)
    if not storage.exists(path):
        return None
    return read_json(path)


def global_record_path(job_dir: str, op_index: int) -> str:
    return storage.join(job_dir, *ray_job_global_record(op_index).split("/"))


def read_global_record(job_dir: str, op_index: int) -> dict | None:
    """Global op ``op_index``'s record, or None when no driver of its step has started."""
    path = global_record_path(job_dir, op_index)
    if not storage.exists(path):
        return None
    return read_json(path)


def export_record_path(job_dir: str) -> str:
    return storage.join(job_dir, *RAY_JOB_EXPORT_RECORD.split("/"))


def read_export_record(job_dir: str) -> dict | None:
    """The export step's record, or None when no driver of it has started."""
    path = export_record_path(job_dir)
    if not storage.exists(path):
        return None
    return read_json(path)


def read_global_records(job_dir: str) -> list[dict]:
    """Every global step's record in the job directory, by op index; [] when none ran as a Ray Job."""
    names = storage.listdir(storage.join(job_dir, RAY_JOBS_DIR))
    records = []
    for op_index in sorted(k for k in map(ray_job_global_record_key, names) if k is not None):
        try:
            record = read_global_record(job_dir, op_index)
        except (OSError, ValueError):
            continue
        if record is not None:
            records.append(record)
    return records


def read_records(job_dir: str) -> list[dict]:
    """Every group's record in the job directory, by segment then group; [] when the job never ran in
    Ray Jobs mode.  One listing of ``ray_jobs/``; a record removed or half-visible meanwhile is skipped."""
    keys = sorted(k for k in map(ray_job_record_key, storage.listdir(storage.join(job_dir, RAY_JOBS_DIR))) if k)
    records = []
    for seg, gid in keys:
        try:
            record = read_record(job_dir, seg, gid)
        except (OSError, ValueError):
            continue
        if record is not None:
            records.append(record)
    return records


def running_submissions(job_dir: str) -> list[tuple[dict, dict]]:
    """(record, its latest submission) of every group, every global step and the export whose latest
    driver has started and not ended: the Ray Jobs a stop of the job must reach.  A global step's record
    has ``op_index`` where a group's has ``segment_index`` and ``group_id``; the export's has
    ``"step": "export"``."""
    out = []
    export = read_export_record(job_dir)
    for record in [*read_records(job_dir), *read_global_records(job_dir), *([export] if export else [])]:
        entry = latest_submission(record)
        if entry is not None and entry.get("state") not in ENDED:
            out.append((record, entry))
    return out


def submitted_at(entry: dict) -> float | None:
    """When the submission was made (the submitter's clock, as its spec carried it), else when its driver
    first recorded a state; None when neither is known."""
    if isinstance(entry.get("submitted_at"), (int, float)):
        return float(entry["submitted_at"])
    first: dict[str, Any] = next(iter(entry.get("transitions") or []), {})
    return float(first["at"]) if isinstance(first.get("at"), (int, float)) else None


def latest_submission(record: dict | None) -> dict | None:
    """The record's submission with the highest attempt, or None."""
    subs = (record or {}).get("submissions") or []
    return max(subs, key=lambda s: s.get("attempt", 0)) if subs else None


def find_submission(record: dict | None, sid: str) -> dict | None:
    return next((s for s in (record or {}).get("submissions") or [] if s.get("submission_id") == sid), None)


class GroupIdentity(Protocol):
    """What a group's record names of it (``engine.planning.execution_group.ExecutionGroup`` is one)."""

    @property
    def group_id(self) -> int: ...

    @property
    def partition_ids(self) -> Sequence[int]: ...


def record_transition(
    job_dir: str,
    segment_index: int,
    group: GroupIdentity,
    sid: str,
    state: str,
    *,
    job_id: str,
    attempt: int,
    identity: dict | None = None,
    **fields,
) -> dict:
    """Append ``state`` to submission ``sid``'s transitions (creating its entry from ``identity``: host,
    pid, provider version); ``fields`` (results, error) are set on the entry.  Returns the entry."""
    gid = int(group.group_id)
    fresh = {
        "job_id": job_id,
        "segment_index": int(segment_index),
        "group_id": gid,
        "partition_ids": list(group.partition_ids),
        "submissions": [],
    }
    return _append(record_path(job_dir, segment_index, gid), fresh, sid, state, attempt, identity, fields)


def record_global_transition(
    job_dir: str,
    op_index: int,
    sid: str,
    state: str,
    *,
    job_id: str,
    op_name: str,
    attempt: int,
    identity: dict | None = None,
    **fields,
) -> dict:
    """:func:`record_transition` for global op ``op_index``'s step (its record names the op)."""
    fresh = {"job_id": job_id, "op_index": int(op_index), "op_name": op_name, "submissions": []}
    return _append(global_record_path(job_dir, op_index), fresh, sid, state, attempt, identity, fields)


def record_export_transition(
    job_dir: str,
    sid: str,
    state: str,
    *,
    job_id: str,
    attempt: int,
    identity: dict | None = None,
    **fields,
) -> dict:
    """:func:`record_transition` for the export step (its record says ``"step": "export"``)."""
    fresh = {"job_id": job_id, "step": "export", "submissions": []}
    return _append(export_record_path(job_dir), fresh, sid, state, attempt, identity, fields)


def _append(path: str, fresh: dict, sid: str, state: str, attempt: int, identity: dict | None, fields: dict) -> dict:
    """Append ``state`` to submission ``sid`` of the record at ``path`` (``fresh`` when there is none yet),
    by an atomic replace; returns the submission's entry."""
    if state not in STATES:
        raise ValueError(f"unknown Ray job state {state!r}: use one of {', '.join(STATES)}")
    record = (read_json(path) if storage.exists(path) else None) or fresh
    entry = find_submission(record, sid)
    if entry is None:
        entry = {"submission_id": sid, "attempt": int(attempt), **(identity or {}), "transitions": []}
        record["submissions"].append(entry)
    entry["state"] = state
    entry["transitions"].append({"state": state, "at": time.time()})
    entry.update(fields)
    write_json(path, record)
    return entry
