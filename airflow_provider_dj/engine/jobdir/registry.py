"""A small registry of recent jobs on this machine: job id -> job directory.

Why: ``dj-airflow monitor JOB_ID`` should work without the user remembering
which work_dir a recipe used.  The runner records each job when it starts
(the ``validate`` task, ``dj-airflow run``) and again when it ends (the
summary writer).  It is a convenience index, never a source of truth: the
job directory is.  Failures to update it are logged and ignored.

Location: ``$DJ_STATE_DIR/jobs.json`` if set (tests point it at a tmp dir),
else ``$XDG_CACHE_HOME/airflow-provider-dj/jobs.json``, else
``~/.cache/airflow-provider-dj/jobs.json``.  Writes are atomic (temp file +
rename) under an advisory ``flock`` so concurrent tasks do not lose each
other's entries; the file keeps the last ``MAX_ENTRIES`` jobs.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
import time

from airflow_provider_dj import settings

MAX_ENTRIES = 100


def registry_path() -> str:
    state = settings.get("state_dir")
    if state:
        return os.path.join(state, "jobs.json")
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "airflow-provider-dj", "jobs.json")


@contextlib.contextmanager
def _locked(path: str):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".lock", "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _read(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
        return data if isinstance(data, dict) and isinstance(data.get("jobs"), dict) else {"jobs": {}}
    except (FileNotFoundError, ValueError):
        return {"jobs": {}}


def _write(path: str, data: dict) -> None:
    fd, tmp = tempfile.mkstemp(prefix=".jobs.", dir=os.path.dirname(path))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=1)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def register_job(job_id: str, job_dir: str, *, status: str | None = None, max_entries: int = MAX_ENTRIES) -> dict:
    """Record (or refresh) a job; the oldest entries beyond ``max_entries`` drop out."""
    path = registry_path()
    with _locked(path):
        data = _read(path)
        jobs = data["jobs"]
        entry = dict(jobs.pop(job_id, {}))
        entry.update(job_dir=job_dir, updated_at=time.time())
        entry.setdefault("registered_at", entry["updated_at"])
        if status:
            entry["status"] = status
        jobs[job_id] = entry  # re-inserted last: dicts keep insertion order, newest at the end
        while len(jobs) > max_entries:
            jobs.pop(next(iter(jobs)))
        _write(path, data)
    return entry


def lookup_job(job_id: str) -> str | None:
    """The recorded job directory of ``job_id``, or None."""
    entry = _read(registry_path())["jobs"].get(job_id)
    return entry.get("job_dir") if entry else None


def recent_jobs() -> dict[str, dict]:
    """job id -> entry, oldest first."""
    return dict(_read(registry_path())["jobs"])
