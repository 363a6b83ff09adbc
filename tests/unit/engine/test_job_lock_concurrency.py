"""Runners racing for one job, and many writers of the recent-jobs registry, in real processes.

The runner lock is check-then-write; without the directory flock two
runners started at the same instant both found the job free and both ran
it.  Each racer here is its own process, released at the same moment.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import time

from airflow_provider_dj.engine.jobdir import lock as job_lock
from airflow_provider_dj.engine.jobdir import registry as job_registry


def _race_acquire(job_dir: str, run_id: str, go_at: float, out) -> None:
    while time.time() < go_at:
        pass  # spin: all racers leave at the same instant
    try:
        job_lock.acquire(job_dir, job_lock.owner_identity(run_id))
        out.put((run_id, "won", os.getpid()))
    except job_lock.JobLockedError as exc:
        out.put((run_id, "refused", str(exc)))


def test_exactly_one_of_many_simultaneous_runners_gets_the_job(tmp_path):
    ctx = mp.get_context("fork")
    job_dir = str(tmp_path / "job1")
    os.makedirs(job_dir)
    out = ctx.Queue()
    go_at = time.time() + 1.0
    procs = [ctx.Process(target=_race_acquire, args=(job_dir, f"run_{i}", go_at, out)) for i in range(8)]
    for p in procs:
        p.start()
    results = [out.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    winners = [r for r in results if r[1] == "won"]
    assert len(winners) == 1, results
    lock = job_lock.read_lock(job_dir)
    assert lock["airflow_run_id"] == winners[0][0]  # the lock on disk is the winner's
    for _run_id, what, msg in results:
        if what == "refused":  # each loser is told who holds the job
            assert f"airflow_run_id={winners[0][0]}" in msg and "host=" in msg and "pid=" in msg


def _heartbeat_loop(job_dir: str, run_id: str, n: int) -> None:
    for _ in range(n):
        job_lock.heartbeat(job_dir, run_id)


def test_heartbeats_never_overwrite_a_lock_another_runner_took_over(tmp_path):
    """A heartbeat reads and rewrites the lock; under the guard a takeover in between cannot be undone."""
    ctx = mp.get_context("fork")
    job_dir = str(tmp_path / "job2")
    os.makedirs(job_dir)
    job_lock.acquire(job_dir, job_lock.owner_identity("old_run"))
    beater = ctx.Process(target=_heartbeat_loop, args=(job_dir, "old_run", 300))
    beater.start()
    time.sleep(0.05)
    job_lock.force_unlock(job_dir)
    job_lock.acquire(job_dir, job_lock.owner_identity("new_run"))
    beater.join(timeout=120)
    assert job_lock.read_lock(job_dir)["airflow_run_id"] == "new_run"


def test_release_removes_only_the_callers_own_lock(tmp_path):
    job_dir = str(tmp_path / "job3")
    os.makedirs(job_dir)
    job_lock.acquire(job_dir, job_lock.owner_identity("owner"))
    job_lock.release(job_dir, "somebody_else")
    assert job_lock.read_lock(job_dir)["airflow_run_id"] == "owner"
    job_lock.release(job_dir, "owner")
    assert job_lock.read_lock(job_dir) is None
    job_lock.release(str(tmp_path / "never_planned"), "owner")  # no job dir: nothing to do, nothing created
    assert not os.path.exists(tmp_path / "never_planned")


def _register_many(state_dir: str, worker: int, n: int, go_at: float) -> None:
    os.environ["DJ_STATE_DIR"] = state_dir
    while time.time() < go_at:
        pass
    for i in range(n):
        job_registry.register_job(f"w{worker}_j{i}", f"/work/w{worker}/j{i}", status="running")


def test_concurrent_registrations_all_survive_and_the_file_stays_valid(tmp_path):
    ctx = mp.get_context("fork")
    state = str(tmp_path / "state")
    go_at = time.time() + 1.0
    procs = [ctx.Process(target=_register_many, args=(state, w, 10, go_at)) for w in range(6)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
        assert p.exitcode == 0
    with open(os.path.join(state, "jobs.json"), encoding="utf-8") as fh:
        jobs = json.load(fh)["jobs"]
    assert sorted(jobs) == sorted(f"w{w}_j{i}" for w in range(6) for i in range(10))
    assert jobs["w3_j7"]["job_dir"] == "/work/w3/j7"
    assert not [n for n in os.listdir(state) if n.startswith(".jobs.")]  # no temp file left behind


def test_a_refused_new_job_writes_nothing_over_the_holders_config(tmp_path):
    """Two runs start one job id at once with different overrides: the one refused by the lock must not
    have written its effective config (its export_path) over the winner's."""
    import pytest

    from airflow_provider_dj.engine.config.recipe import load_recipe
    from airflow_provider_dj.engine.job.setup import prepare_job
    from airflow_provider_dj.engine.jobdir import lock as job_lock

    data = tmp_path / "in.jsonl"
    data.write_text("".join(f'{{"text": "row number {i} of the input"}}\n' for i in range(6)))
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        f"project_name: lock_order\ndataset_path: {data}\nexport_path: {tmp_path / 'mine.jsonl'}\n"
        f"work_dir: {tmp_path / 'work'}\nprocess:\n  - whitespace_normalization_mapper:\n"
    )
    job_dir = tmp_path / "work" / "same_job"
    os.makedirs(job_dir)
    holder = dict(job_lock.owner_identity("winner_run"), pid=os.getppid())  # a live process, not ours
    job_lock.acquire(str(job_dir), holder)
    with pytest.raises(job_lock.JobLockedError, match="winner_run"):
        prepare_job(load_recipe(str(recipe)), job_id="same_job", airflow_run_id="loser_run")
    assert not (job_dir / "metadata" / "effective_config.json").exists()
