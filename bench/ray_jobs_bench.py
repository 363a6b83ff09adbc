"""Ray Jobs mode against the in-worker driver: the overhead per partition group, and the worker slots a job holds.

One separate Ray head with its dashboard on loopback (tests/integration/ray_jobs_cluster.py), one
20-partition job of a cheap per-row recipe (no global op: one segment), its groups run one after
another in two modes, alternating which goes first over ``--repeat`` runs, each run in a fresh job
directory:

* ``driver``: what ``PartitionGroupOperator`` does with a ``ray`` connection naming the head's GCS
  address: the task connects to the cluster (``ray.init(address=...)``; a fresh Airflow task process
  connects anew, so it is done per group and ``ray.shutdown()`` after it, unless ``--connect once``)
  and drives the group (``run_group`` with a ``RayDispatcher``).  The task holds its worker slot for
  all of it: slot-seconds = connect + run, summed over the groups.
* ``jobs``: the same operator with a connection naming the dashboard: ``execute`` submits the group
  as a Ray Job and defers (timed until ``TaskDeferred``); the trigger's wait is done here as the
  trigger does it (``client.poll`` every ``--poll-interval`` seconds, the operator's default 5 s);
  then ``execute_complete`` verifies the group's checkpoints (timed).  Slot-seconds deferred =
  submit + complete; waiting in the worker (``deferrable=False``) = submit + wait + complete.

Per Ray Job, from the driver's record in the job directory and the cluster's job info: submit call
-> driver's "started" (job agent, driver process start, imports, checks) -> "succeeded" (connect
and the group's work) -> Ray's end time (driver exit) -> seen by the poll (the polling interval).

After each run the job is exported in this process; both modes' exports must be byte-identical.
Not counted in either mode: the Airflow task process's own start (a deferred task starts twice)
and the triggerer.  Usage::

    .venv/bin/python -m bench ray-jobs --repeat 3             # 20 partitions, groups of 1
    .venv/bin/python -m bench ray-jobs --repeat 1 --partitions 4 --poll-interval 1
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from types import SimpleNamespace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from airflow_provider_dj.engine.planning.execution_group import ExecutionGroup

RUN_ID = "ray-jobs-bench-run"
MODES = ("driver", "jobs")
CONN = {"driver": "djbench_driver", "jobs": "djbench_jobs"}
PROCESS = """process:
  - clean_email_mapper:
  - whitespace_normalization_mapper:
  - words_num_filter: {min_num: 5, max_num: 100000}
  - text_length_filter: {min_len: 20}
"""


def write_recipe(root: str, data: str, tag: str, parts: int) -> str:
    """The bench recipe over ``data``: ``parts`` partitions, per-row ops only, exporting to ``{root}/{tag}.jsonl``."""
    path = os.path.join(root, f"{tag}.yaml")
    with open(path, "w") as fh:
        fh.write(
            f"project_name: rjbench_{tag}\ndataset_path: {data}\nexport_path: {root}/{tag}.jsonl\n"
            f"work_dir: {root}/work\npartition: {{mode: manual, num_of_partitions: {parts}}}\n"
            "checkpoint: {strategy: every_op}\n" + PROCESS
        )
    return path


def plan(recipe: str, tag: str, group_size: int):
    from airflow_provider_dj.engine.config.recipe import load_recipe
    from airflow_provider_dj.engine.job.setup import prepare_job

    return prepare_job(load_recipe(recipe), job_id=tag, airflow_run_id=RUN_ID, group_size=group_size)


def task_context() -> dict:
    """What the operator reads of a task instance's context: a first try of the run that planned the job."""
    ti = SimpleNamespace(dag_id="rjbench", run_id=RUN_ID, task_id="partitions_seg0", map_index=0, try_number=1)
    return {"ti": ti, "dag_run": SimpleNamespace(run_id=RUN_ID)}


def operator(job_dir: str, group: ExecutionGroup, mode: str, poll_interval: float):
    from airflow_provider_dj.operators.partition_group import PartitionGroupOperator

    return PartitionGroupOperator(
        task_id="partitions_seg0",
        job_dir=job_dir,
        segment_index=0,
        execution_group=group.to_dict(),  # as XCom hands it to the task
        ray_conn_id=CONN[mode],
        poll_interval=poll_interval,
    )


def driver_group(op, connect_each: bool) -> dict:
    """One group in the in-worker driver mode: connect (the hook's ``get_client``), then ``execute``."""
    import ray

    from airflow_provider_dj.hooks.ray import RayHook

    t0 = time.perf_counter()
    RayHook(ray_conn_id=op.ray_conn_id).get_client()
    t1 = time.perf_counter()
    results = op.execute(task_context())
    t2 = time.perf_counter()
    if connect_each:
        ray.shutdown()  # the next group is the next task process: it connects anew
    return {"connect": t1 - t0, "run": t2 - t1, "wall": t2 - t0, "results": results}


def jobs_group(op, poll_interval: float) -> dict:
    """One group in Ray Jobs mode: ``execute`` until it defers, the trigger's wait, ``execute_complete``."""
    t0, w0 = time.perf_counter(), time.time()
    try:
        op.execute(task_context())
        raise RuntimeError("the operator did not defer: a group already done?")
    except BaseException as exc:
        if type(exc).__name__ != "TaskDeferred":
            raise
    t1 = time.perf_counter()
    from airflow_provider_dj.hooks.ray_jobs import ACTIVE

    client, sid = op._ray_job
    while True:
        status, progress = client.poll(sid, op.job_dir, 0, op.execution_group["partition_ids"])
        if status not in ACTIVE:
            break
        time.sleep(poll_interval)
    t2, w2 = time.perf_counter(), time.time()
    event = {"submission_id": sid, "status": status, "progress": progress, "message": ""}
    results = op.execute_complete(task_context(), event)
    t3 = time.perf_counter()
    marks = job_marks(client, sid, op.job_dir, int(op.execution_group["group_id"]), w0, w2)
    return {"submit": t1 - t0, "wait": t2 - t1, "complete": t3 - t2, "wall": t3 - t0, "results": results, **marks}


def job_marks(client, sid: str, job_dir: str, gid: int, w_start: float, w_seen: float) -> dict:
    """Where a Ray Job's time went, from the driver's record and the cluster's job info (wall clock)."""
    from airflow_provider_dj.engine.jobdir import ray_jobs

    entry = ray_jobs.find_submission(ray_jobs.read_record(job_dir, 0, gid), sid)
    at = {t["state"]: t["at"] for t in entry["transitions"]}
    end = client.info(sid).end_time / 1000.0
    return {
        "to_driver": at["started"] - entry["submitted_at"],  # job agent, driver process, imports, checks
        "driver_run": at["succeeded"] - at["started"],  # connect, the group's work, the record
        "driver_exit": end - at["succeeded"],  # the driver process ends, Ray marks the job ended
        "poll_lag": w_seen - end,  # until the next poll sees it
        "before_submit": entry["submitted_at"] - w_start,  # hook, lookups of earlier submissions
    }


def run_mode(mode: str, root: str, data: str, args, rep: int) -> dict:
    """The whole job's one segment in ``mode``, group after group, then its export; timings per group."""
    from airflow_provider_dj.engine.runner.local import run_prepared_job

    tag = f"{mode}{rep}"
    prepared = plan(write_recipe(root, data, tag, args.partitions), tag, args.group_size)
    groups = []
    for group in prepared.groups:
        op = operator(prepared.job_dir, group, mode, args.poll_interval)
        if mode == "driver":
            groups.append(driver_group(op, args.connect == "per-group"))
        else:
            groups.append(jobs_group(op, args.poll_interval))
    if mode == "driver" and args.connect == "once":
        import ray

        ray.shutdown()
    result = run_prepared_job(prepared, workers=1, say=lambda _m: None)
    with open(result.export_path, "rb") as fh:
        digest = hashlib.sha256(fh.read()).hexdigest()
    rows_out = sorted((r["partition_id"], r.get("rows_out")) for g in groups for r in g.pop("results"))
    shutil.rmtree(prepared.job_dir, ignore_errors=True)
    return {"mode": mode, "rep": rep, "groups": groups, "export_sha256": digest, "rows": result.rows, "out": rows_out}


#: What a Ray Job's driver does before and after the group's work, in a fresh interpreter: imports, connect, disconnect.
PROBE = """
import json, sys, time
t0 = time.perf_counter()
from airflow_provider_dj.engine.runner import dispatch, group_job, steps
t1 = time.perf_counter()
import ray
ray.init(address=sys.argv[1], log_to_driver=False)
t2 = time.perf_counter()
ray.shutdown()
print(json.dumps({"imports": t1 - t0, "connect": t2 - t1, "disconnect": time.perf_counter() - t2}))
"""


def probe(gcs_address: str) -> dict:
    """One fresh interpreter doing a Ray Job driver's set-up (``python`` start included in ``process``)."""
    import subprocess

    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", PROBE, gcs_address], capture_output=True, text=True, check=True)
    wall = time.perf_counter() - t0
    parts = json.loads(out.stdout.strip().splitlines()[-1])
    return {"process": wall, **parts, "interpreter": wall - sum(parts.values())}


def stats(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def summarize(runs: list[dict], probes: list[dict]) -> dict:
    """Per-group figures over every run of each mode, and the slot-seconds of one 20-partition job (median run)."""
    out: dict = {}
    if probes:
        out["fresh_driver"] = {k: stats([p[k] for p in probes]) for k in probes[0]}
    for mode in MODES:
        mine = [r for r in runs if r["mode"] == mode]
        keys = [k for k, v in mine[0]["groups"][0].items() if isinstance(v, float)]
        out[mode] = {k: stats([g[k] for r in mine for g in r["groups"]]) for k in keys}
    drv = [r for r in runs if r["mode"] == "driver"]
    jobs = [r for r in runs if r["mode"] == "jobs"]
    slots = {
        "driver": [sum(g["wall"] for g in r["groups"]) for r in drv],
        "jobs_waiting": [sum(g["wall"] for g in r["groups"]) for r in jobs],
        "jobs_deferred": [sum(g["submit"] + g["complete"] for g in r["groups"]) for r in jobs],
    }
    out["slot_seconds"] = {k: stats(v) for k, v in slots.items()}
    out["overhead_per_group"] = out["jobs"]["wall"]["median"] - out["driver"]["wall"]["median"]
    out["groups_per_job"] = len(runs[0]["groups"])
    digests = {r["export_sha256"] for r in runs}
    outs = {json.dumps(r["out"]) for r in runs}
    out["exports_identical"] = len(digests) == 1 and len(outs) == 1
    return out


def report(s: dict, args, load: tuple) -> str:
    lines = [
        f"partitions={args.partitions} group_size={args.group_size} groups/job={s['groups_per_job']} rows={args.rows} "
        f"repeat={args.repeat} poll_interval={args.poll_interval}s connect={args.connect} "
        f"load avg before/after={load[0]:.2f}/{load[1]:.2f}",
        "per group (s): median  min  max",
    ]
    for mode in (*MODES, "fresh_driver"):
        for k, v in s.get(mode, {}).items():
            lines.append(f"  {mode:12s} {k:13s} {v['median']:7.3f} {v['min']:7.3f} {v['max']:7.3f}")
    lines.append(f"overhead per group (jobs wall - driver wall, medians): {s['overhead_per_group']:.3f} s")
    lines.append(f"worker-slot-seconds per {s['groups_per_job']}-group job (median run, min, max):")
    for k, v in s["slot_seconds"].items():
        lines.append(f"  {k:14s} {v['median']:8.2f} {v['min']:8.2f} {v['max']:8.2f}")
    sl = {k: v["median"] for k, v in s["slot_seconds"].items()}
    lines.append(
        f"ratios: jobs waiting / driver {sl['jobs_waiting'] / sl['driver']:.2f}; "
        f"jobs deferred / driver {sl['jobs_deferred'] / sl['driver']:.3f}"
    )
    lines.append(f"exports and per-partition rows identical across modes and runs: {s['exports_identical']}")
    return "\n".join(lines)


def set_connections(cluster) -> None:
    """Two ``ray`` connections to the one head: its GCS address (driver) and its dashboard (Ray Jobs)."""
    host, port = cluster.gcs_address.rsplit(":", 1)
    os.environ[f"AIRFLOW_CONN_{CONN['driver'].upper()}"] = json.dumps({"conn_type": "ray", "host": host, "port": port})
    dash = int(cluster.address.rsplit(":", 1)[1])
    os.environ[f"AIRFLOW_CONN_{CONN['jobs'].upper()}"] = json.dumps(
        {"conn_type": "ray", "host": "http://127.0.0.1", "port": dash}
    )


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench ray-jobs", description=__doc__.splitlines()[0])
    ap.add_argument("--partitions", type=int, default=20)
    ap.add_argument("--group-size", type=int, default=1, help="partitions per group (the scheduler's default: 1)")
    ap.add_argument("--rows", type=int, default=20_000)
    ap.add_argument("--repeat", type=int, default=3, help="runs of each mode, alternating which goes first")
    ap.add_argument("--poll-interval", type=float, default=5.0, help="the trigger's poll (the operator's default)")
    ap.add_argument("--connect", choices=("per-group", "once"), default="per-group", help="driver mode's ray.init")
    ap.add_argument("--cpus", type=int, default=2, help="the head's CPUs")
    ap.add_argument("--probes", type=int, default=3, help="fresh interpreters doing a driver's set-up, timed")
    ap.add_argument("--json", help="write every run's timings and the summary here")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    root = tempfile.mkdtemp(prefix="dj-rjbench-")
    os.environ["RAY_AUTH_MODE"] = "token"  # the head uses token auth; the clients send the token
    os.environ.setdefault("AIRFLOW_HOME", os.path.join(root, "airflow"))
    os.environ.setdefault("AIRFLOW__LOGGING__LOGGING_LEVEL", "WARNING")  # the operators log every group
    from airflow_provider_dj.testing.sample_corpus import write_corpus
    from tests.integration.ray_jobs_cluster import RayJobsCluster

    data = write_corpus(os.path.join(root, "in.jsonl"), args.rows, seed=42)
    load0 = os.getloadavg()[0]
    cluster = RayJobsCluster(num_cpus=args.cpus).start()
    runs: list[dict] = []
    probes: list[dict] = []
    try:
        set_connections(cluster)
        probes += [probe(cluster.gcs_address) for _ in range(args.probes)]
        for rep in range(args.repeat):
            for mode in MODES if rep % 2 == 0 else MODES[::-1]:
                t0 = time.perf_counter()
                runs.append(run_mode(mode, root, data, args, rep))
                print(f"run {rep} {mode}: {time.perf_counter() - t0:.1f} s", flush=True)
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
    summary = summarize(runs, probes)
    print(report(summary, args, (load0, os.getloadavg()[0])))
    if args.json:
        from bench.report import write_json

        write_json(args.json, {"args": vars(args), "summary": summary, "runs": runs, "probes": probes})
    return 0 if summary["exports_identical"] else 1


if __name__ == "__main__":
    sys.exit(main())
