"""``dj-airflow stop`` against a DAG run in Ray Jobs mode, as rounds of one scenario with different stop timings.

Each round runs the recipe's DAG with ``dag.test()`` (the partition task submits its group's Ray Job to the
module's Ray head and waits for it deferred, in the trigger, or in the worker), holds the group's partitions
at a fault point, and lets a thread play the user: once the job directory shows the round's stop point, it
runs ``dj-airflow stop`` (graceful or ``--force``).  Nothing waits on a clock: every stop point is read from
the job directory.  The round then checks what a stopped task must be, whichever of the stop's paths reached
the group's driver first: its task failed once without a retry, its Ray Job ended with the record saying
``stopped`` by ``stop_request``, each partition it cut short has its ``partition_stopped`` event, and the
summary says ``stopped``.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass

from airflow_provider_dj.engine.jobdir import ray_jobs, stop_control
from airflow_provider_dj.engine.jobdir.events import read_events
from airflow_provider_dj.engine.jobdir.layout import STOP_REQUEST
from tests.integration.crash_helpers import write_faults

#: The file a hold waits for that no round writes: a forced stop must end the hold by killing it.
NEVER = "_never"


@dataclass(frozen=True)
class Round:
    """One round: how the task waits, how the user stops, where the partitions are held, and when."""

    name: str
    deferrable: bool
    force: bool
    hold_op: int  # each partition pauses as this op starts ...
    until: str  # ... until this file (relative to the job dir) exists
    stop_at: str  # "started": the driver recorded its start; "held": a partition is inside its hold;
    #               "watch_first": the forced request alone, and Ray's stop only after the driver ended


ROUNDS = (
    Round("force-deferred-at-driver-start", True, True, 1, NEVER, "started"),
    Round("force-in-worker-mid-op", False, True, 1, NEVER, "held"),
    Round("force-deferred-driver-first", True, True, 1, NEVER, "watch_first"),
    Round("graceful-deferred-mid-op", True, False, 1, STOP_REQUEST, "held"),
    Round("graceful-in-worker-at-driver-start", False, False, 0, STOP_REQUEST, "started"),
)


def _latest(job_dir: str) -> dict | None:
    records = ray_jobs.read_records(job_dir)
    return ray_jobs.latest_submission(records[0]) if records else None


def _wait_for(pred, what: str, limit: float = 180.0):
    deadline = time.time() + limit
    while time.time() < deadline:
        got = pred()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _stop_point(job_dir: str, rnd: Round, partitions: list[int]) -> None:
    """Wait until the job directory shows the round's stop point."""
    if rnd.stop_at == "started":
        _wait_for(lambda: (_latest(job_dir) or {}).get("state") == "started", "the driver's start")
        return
    fired = os.path.join(job_dir, "_fault_injection.fired")
    _wait_for(lambda: os.path.isdir(fired) and len(os.listdir(fired)) == len(partitions), "every partition held")


def user_stops(main, work: str, job_id: str, rnd: Round, partitions: list[int], out: dict) -> None:
    """The user's side of a round: wait for its stop point, then ``dj-airflow stop``."""
    job_dir = os.path.join(work, job_id)
    _stop_point(job_dir, rnd, partitions)
    if rnd.stop_at == "watch_first":
        # Ray's stop comes late (a slow dashboard): the driver's forced-stop watch sees the request first.
        stop_control.request_stop(job_dir, force=True, requested_by="a user whose dashboard is slow")
        _wait_for(lambda: (_latest(job_dir) or {}).get("state") in ray_jobs.ENDED, "the driver's end")
    argv = ["stop", job_id, "--work-dir", work, "--timeout", "0"] + (["--force"] if rnd.force else [])
    out["rc"] = main(argv)


def run_round(run_dag, main, recipe: str, work: str, rnd: Round, partitions: list[int], k: int) -> tuple:
    """Run one round; returns (job dir, dag run, the stop's exit status)."""
    job_id = f"rjstop{k}"
    job_dir = os.path.join(work, job_id)
    hold = {"point": "op_start", "op_index": rnd.hold_op, "kind": "delay", "seconds": 300, "until": rnd.until}
    write_faults(job_dir, [{**hold, "partition_id": p} for p in partitions])
    out: dict = {}
    errors: list = []

    def body():
        try:
            user_stops(main, work, job_id, rnd, partitions, out)
        except BaseException as exc:  # noqa: BLE001 - re-raised by the test
            errors.append(exc)

    t = threading.Thread(target=body, daemon=True)
    t.start()
    dr = run_dag(recipe, job_id, rnd.deferrable)
    t.join(60)
    assert not errors, (rnd.name, errors)
    return job_dir, dr, out.get("rc")


def check_round(job_dir: str, dr, rnd: Round, client) -> dict:
    """What a stopped task and its Ray Job must leave, whatever the timing; returns the group's entry."""
    import json

    tis = {(ti.task_id, ti.map_index): (str(ti.state), ti.try_number) for ti in dr.get_task_instances()}
    parts = {k: v for k, v in tis.items() if k[0] == "partitions_seg0"}
    assert str(dr.state).endswith("failed"), (rnd.name, tis)
    assert parts and set(parts.values()) == {("failed", 1)}, (rnd.name, parts)  # stopped, never retried
    assert tis[("export", -1)][0] == "upstream_failed", (rnd.name, tis)
    (record,) = ray_jobs.read_records(job_dir)
    (entry,) = record["submissions"]  # one submission: nothing was submitted again
    assert (entry["state"], entry["stopped_by"]) == ("stopped", "stop_request"), (rnd.name, entry)
    assert client.status(entry["submission_id"]) in ("STOPPED", "FAILED"), rnd.name
    stopped = [e for e in read_events(job_dir, "partition_stopped") if e["segment"] == 0]
    assert sorted(e["partition_id"] for e in stopped) == record["partition_ids"], (rnd.name, stopped)  # once each
    if not rnd.force and rnd.hold_op == 1:  # released by the request: op 1 committed, then the stop
        assert {e.get("after_op") for e in stopped} == {1}, (rnd.name, stopped)
    with open(os.path.join(job_dir, "job_summary.json")) as fh:
        assert json.load(fh)["status"] == "stopped", rnd.name
    assert read_events(job_dir, "job_stopped"), rnd.name
    (requested,) = read_events(job_dir, "stop_requested")
    outcomes = {s["outcome"] for s in requested.get("ray_jobs") or []}
    assert outcomes <= {"stopped", "ended"}, (rnd.name, requested)
    return entry
