"""End to end: Ray Jobs mode under a real scheduler and triggerer (docs/deployment.md, "Ray Jobs mode").

A Ray cluster of its own on loopback, three nodes (``ray start --head`` with its dashboard and two
``ray start --address`` worker nodes, each with one CPU and a custom resource of its own:
``RayJobsCluster``), and an ``airflow standalone`` whose ``ray`` connection names that dashboard,
driven over REST:

* a DAG run's partition tasks submit one Ray Job per group and **defer**: while the Ray jobs run,
  every ``partitions_seg0`` instance is ``deferred`` (no worker slot held);
* the **triggerer is SIGKILLed** (with its trigger-runner child) while the Ray jobs run, and a new
  triggerer is started: the triggers move to it and the run finishes with **nothing resubmitted**
  (the cluster holds one submission per group), every op of every partition ran once (the job's
  ``op_complete`` events), and the export is byte-identical to the engine's run of the same recipe
  in this process;
* a second DAG, **exact and near deduplication** (``document_deduplicator`` then
  ``document_minhash_deduplicator``) over Data-Juicer's near-duplicate corpus, whose duplicates span
  its partitions, with each global step in **3 key shards** (``DJ_GLOBAL_STEP_SHARDS`` in the server's
  environment): the steps and the export run as Ray Jobs, their tasks on more than one node (Ray's
  state API), and the export and lineage are byte-identical to the engine's single-process step in this
  process, whose kept rows are Data-Juicer 1.6.1's;
* a **clear of a succeeded group** over REST runs its task again, which finds its Ray job succeeded
  and its checkpoints whole, and submits nothing;
* **mark failed** on a deferred group stops its Ray job;
* a third DAG whose recipe turns **deferral off** (``partition.ray_jobs_deferrable: false``): a task
  process SIGKILLed while it waits for its held Ray job is retried by Airflow, and the retry attaches
  to that Ray job instead of submitting another.

The Ray jobs are held at a fault-injection point (``delay`` ``until`` a file the test writes) so the
kill lands while they run, not by timing.  Nothing is mocked.
"""

from __future__ import annotations

import glob
import json
import os
import re
import signal
import subprocess
from collections import Counter

import psutil
import pyarrow as pa
import pytest

from airflow_provider_dj.engine.jobdir import ray_jobs
from airflow_provider_dj.engine.jobdir.events import read_events
from tests.e2e.airflow_server import VENV_BIN, AirflowServer
from tests.helpers_job_view import view_recipe, write_view_input
from tests.integration.crash_helpers import write_faults
from tests.integration.ray_jobs_cluster import RayJobsCluster
from tests.ports import free_port

pytestmark = pytest.mark.e2e

DAG = "e2e_rayjobs"
PARTS, ROWS = 3, 240
OPS = "process:\n  - whitespace_normalization_mapper:\n  - words_num_filter:\n      min_num: 12\n"
RELEASE = "release_ray_jobs"  # the file (in the job dir) whose creation lets the held Ray jobs go on
RUN_TIMEOUT = 600
#: The three nodes' own resources: each worker node is started with one of these (and one CPU).
WORKER_RESOURCES = ({"node_b": 1}, {"node_c": 1})

# The dedup DAG: Data-Juicer's near-duplicate corpus (tests/conformance/near_dedup: 342 rows, exact and
# near copies spread over the file) in 4 partitions, two to a group, each global step in 3 key shards.
#: The same recipe with deferral off: its tasks wait for their Ray Jobs in their worker processes.
NODEFER_DAG = "e2e_rayjobs_nodefer"
DEDUP_DAG = "e2e_rayjobs_dedup"
DEDUP_PARTS, DEDUP_SHARDS = 4, 3
DEDUP_JOB = "rj_dedup"
NEAR_DEDUP = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "conformance", "near_dedup")
DEDUP_RECIPE = """\
project_name: {name}
dataset_path: {data}
export_path: {export}
work_dir: {work}
text_keys: text
partition: {{mode: manual, num_of_partitions: {parts}, execution_group_size: 2}}
process:
  - whitespace_normalization_mapper:
  - document_deduplicator:
  - document_minhash_deduplicator:
"""


def _hold(partitions=range(PARTS)) -> list[dict]:
    """Each of these partitions waits as its op 1 starts, inside its group's Ray job, until the test
    releases it (at most two at once: the head has two CPUs; a third waits for one)."""
    return [
        {
            "point": "op_start",
            "partition_id": p,
            "op_index": 1,
            "times": 1,
            "kind": "delay",
            "seconds": 300,
            "until": RELEASE,
        }
        for p in partitions
    ]


@pytest.fixture(scope="module")
def rj(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RAY_AUTH_MODE", "token")  # the head's auth: this process's clients send the token
        yield from _rj(tmp_path_factory)


def _rj(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("rayjobs"))
    recipes, work, exports = (os.path.join(root, d) for d in ("recipes", "work", "exports"))
    for d in (recipes, work, exports):
        os.makedirs(d)
    data, _nulls = write_view_input(os.path.join(root, "data", "rows.jsonl"), ROWS)
    recipe = os.path.join(recipes, f"{DAG}.yaml")
    with open(recipe, "w") as fh:
        fh.write(view_recipe(DAG, data, os.path.join(exports, f"{DAG}.jsonl"), work, PARTS, ops=OPS))
    nodefer_recipe = os.path.join(recipes, f"{NODEFER_DAG}.yaml")
    with open(nodefer_recipe, "w") as fh:
        text = view_recipe(NODEFER_DAG, data, os.path.join(exports, f"{NODEFER_DAG}.jsonl"), work, PARTS, ops=OPS)
        held = f"num_of_partitions: {PARTS}}}"
        assert held in text
        fh.write(text.replace(held, f"num_of_partitions: {PARTS}, ray_jobs_deferrable: false}}"))
    dedup_recipe = os.path.join(recipes, f"{DEDUP_DAG}.yaml")
    with open(dedup_recipe, "w") as fh:
        fh.write(
            DEDUP_RECIPE.format(
                name=DEDUP_DAG,
                data=os.path.join(NEAR_DEDUP, "inputs", "near_dup.jsonl"),
                export=os.path.join(exports, f"{DEDUP_DAG}.jsonl"),
                work=work,
                parts=DEDUP_PARTS,
            )
        )
    # Three CPUs on the head: while the first test holds three partitions (a CPU each), the dedup run
    # beside it still has two.
    cluster = RayJobsCluster(num_cpus=3, worker_resources=WORKER_RESOURCES).start()
    conn = {"conn_type": "ray", "host": "http://127.0.0.1", "port": int(cluster.address.rsplit(":", 1)[1])}
    home = os.path.join(root, "airflow")
    server = AirflowServer(
        home=home,
        sql_alchemy_conn=f"sqlite:///{os.path.join(home, 'airflow.db')}",
        recipes_dir=recipes,
        extra_env={
            "AIRFLOW_CONN_RAY_DEFAULT": json.dumps(conn),
            "RAY_AUTH_MODE": "token",  # the head's auth; the client sends the token
            # A triggerer that stops heartbeating is taken for dead after 10 s (default 30), so its
            # triggers move to the replacement sooner.
            "AIRFLOW__TRIGGERER__JOB_HEARTBEAT_SEC": "2",
            "AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD": "10",
            # Every global step in key shards, whatever its size (only the dedup DAG has one); the
            # engine's reference run in this process has the step in one process.
            "DJ_GLOBAL_STEP_SHARDS": str(DEDUP_SHARDS),
            # One automatic retry: the deferral-off test's killed task process must be retried by
            # Airflow.  The other tests fail nothing on purpose (a mark-failed is not retried).
            "DJ_TASK_RETRIES": "1",
        },
    )
    extra: list[subprocess.Popen] = []
    try:
        client = server.start()
        client.wait_dag(DAG)
        client.wait_dag(DEDUP_DAG)
        client.wait_dag(NODEFER_DAG)
        # The dedup DAG's run starts now and runs beside the first tests (its Ray Jobs and theirs share
        # the cluster, its triggers move with theirs to the replacement triggerer); its test, before the
        # server restarts, waits for it.  Run alone it would add a minute and a half of waiting.
        client.set_paused(DEDUP_DAG, False)
        dedup_export = os.path.join(exports, f"{DEDUP_JOB}.jsonl")
        dedup_run = client.trigger(DEDUP_DAG, {"job_id": DEDUP_JOB, "export_path": dedup_export})["dag_run_id"]
        yield {
            "server": server,
            "client": client,
            "cluster": cluster,
            "recipe": recipe,
            "nodefer_recipe": nodefer_recipe,
            "dedup_recipe": dedup_recipe,
            "dedup_run": dedup_run,
            "work": work,
            "exports": exports,
            "extra": extra,
        }
    finally:
        for proc in extra:
            _kill_tree(proc.pid)
        server.stop()
        cluster.stop()


def _kill_tree(pid: int) -> None:
    try:
        procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return
    for p in procs:
        try:
            p.send_signal(signal.SIGKILL)
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(procs, timeout=10)


def _triggerers(server: AirflowServer) -> list[psutil.Process]:
    """The standalone's triggerer processes: the triggerer and the trigger runner it supervises."""
    top = psutil.Process(server.proc.pid)
    found = []
    for p in top.children(recursive=True):
        try:
            if "triggerer" in " ".join(p.cmdline()):
                found.append(p)
        except psutil.NoSuchProcess:
            continue
    return found


def _trigger_logs(server: AirflowServer, run_id: str, map_index: int) -> list[str]:
    base = os.path.join(
        server.home, "logs", f"dag_id={DAG}", f"run_id={run_id}", "task_id=partitions_seg0", f"map_index={map_index}"
    )
    return sorted(n for n in os.listdir(base) if n.startswith("attempt=1.log.trigger."))


def _mapped_states(client, run_id: str, task_id: str = "partitions_seg0") -> list[str]:
    return [t["state"] for t in client.task_instances(DAG, run_id) if t["task_id"] == task_id]


def _assert_export_is_the_engines(recipe: str, export: str, job_id: str) -> None:
    """The DAG run's export equals the engine's run of the same recipe in this process, byte for byte."""
    from airflow_provider_dj.engine import run_job

    reference = run_job(
        recipe, job_id=job_id, workers=1, overrides={"export_path": export[: -len(".jsonl")] + "_ref.jsonl"}
    )
    with open(export, "rb") as ours, open(reference.export_path, "rb") as engine:
        assert ours.read() == engine.read()


def _all_submissions(cluster_client, job_dir: str, job_id: str) -> list:
    prefix = ray_jobs.base_submission_id(job_dir, job_id, 0, 0).rsplit("-s0-g0", 1)[0]
    return cluster_client.list_submissions(prefix)


def _submissions(cluster_client, job_dir: str, job_id: str) -> list:
    """The job's groups' Ray Jobs (``-s<k>-g<g>``, ``-r<n>`` when resubmitted), not its export's."""
    return [
        s
        for s in _all_submissions(cluster_client, job_dir, job_id)
        if re.search(r"-s\d+-g\d+(-r\d+)?$", s.submission_id)
    ]


def _export_submissions(cluster_client, job_dir: str, job_id: str) -> list:
    """The job's export's Ray Jobs (Ray Jobs mode runs the export on the cluster too)."""
    return [
        s for s in _all_submissions(cluster_client, job_dir, job_id) if re.search(r"-export(-r\d+)?$", s.submission_id)
    ]


def test_deferred_groups_survive_a_killed_triggerer_and_a_cleared_group_is_not_resubmitted(rj):
    from airflow_provider_dj.hooks.ray_jobs import RayJobsClient

    server, client, cluster = rj["server"], rj["client"], rj["cluster"]
    job_id = "rj_kill"
    job_dir = os.path.join(rj["work"], job_id)
    export = os.path.join(rj["exports"], f"{job_id}.jsonl")
    write_faults(job_dir, _hold())
    client.set_paused(DAG, False)
    run_id = client.trigger(DAG, {"job_id": job_id, "export_path": export})["dag_run_id"]

    def records() -> list[str]:
        """The groups' Ray job records, which each group's driver writes once it starts on the cluster."""
        d = os.path.join(job_dir, "ray_jobs")
        return sorted(n for n in os.listdir(d) if n.startswith("seg0_")) if os.path.isdir(d) else []

    def all_deferred_and_running():
        states = _mapped_states(client, run_id)
        if any(s in ("failed", "upstream_failed") for s in states):
            raise AssertionError(f"a partition task failed: {states}\n{server.log_tail()}")
        return states if states and set(states) == {"deferred"} and len(records()) == len(states) else None

    what = f"{DAG}/{run_id}'s partition tasks to defer while their Ray jobs run"
    groups = len(client.wait_for(what, all_deferred_and_running, timeout=RUN_TIMEOUT))
    assert groups == PARTS  # the scheduler's default: one partition a group

    # The triggerer dies hard while every group's Ray job is held mid-partition; a new one starts.
    old = _triggerers(server)
    assert old, server.component_lines("triggerer")
    for p in old:
        p.send_signal(signal.SIGKILL)
    psutil.wait_procs(old, timeout=20)
    log = open(os.path.join(server.home, "triggerer-2.log"), "wb")
    replacement = subprocess.Popen(
        [os.path.join(VENV_BIN, "airflow"), "triggerer"],
        cwd=server.home,
        # Its own port for serving trigger logs: the killed triggerer's may not be free yet.
        env={**server.started_env, "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port())},
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    rj["extra"].append(replacement)
    assert set(_mapped_states(client, run_id)) == {"deferred"}  # the Ray jobs hold; nothing ended
    open(os.path.join(job_dir, RELEASE), "w").close()

    run = client.wait_run(DAG, run_id, timeout=RUN_TIMEOUT)
    assert run["state"] == "success", f"{server.log_tail()}\n{open(log.name, errors='replace').read()[-3000:]}"
    assert replacement.poll() is None
    # Each group's trigger ran in the killed triggerer, then in the replacement (Airflow writes one
    # trigger log per triggerer job that ran it): the triggers resumed there.
    for ti in (t for t in client.task_instances(DAG, run_id) if t["task_id"] == "partitions_seg0"):
        assert len(_trigger_logs(server, run_id, ti["map_index"])) == 2, ti

    jobs_client = RayJobsClient(cluster.address)
    submissions = _submissions(jobs_client, job_dir, job_id)
    assert len(submissions) == groups  # one Ray job per group: the new triggerer resubmitted nothing
    assert {str(j.status.value) for j in submissions} == {"SUCCEEDED"}
    (export_job,) = _export_submissions(jobs_client, job_dir, job_id)  # the export ran on the cluster, once
    assert str(export_job.status.value) == "SUCCEEDED"
    ran = Counter((e["partition_id"], e["op_index"]) for e in read_events(job_dir, "op_complete"))
    assert ran == Counter({(p, op): 1 for p in range(PARTS) for op in range(2)})

    _assert_export_is_the_engines(rj["recipe"], export, "rj_reference")

    # A clear of a succeeded group: its task runs again, finds its Ray job succeeded, submits nothing.
    tis = [t for t in client.task_instances(DAG, run_id) if t["task_id"] == "partitions_seg0"]
    first = min(tis, key=lambda t: t["map_index"])
    client.clear_task_instances(DAG, run_id, [("partitions_seg0", first["map_index"])], include_downstream=False)

    def rerun_done():
        again = next(
            t
            for t in client.task_instances(DAG, run_id)
            if t["task_id"] == "partitions_seg0" and t["map_index"] == first["map_index"]
        )
        if again["try_number"] > first["try_number"] and again["state"] in ("success", "failed"):
            return again
        return None

    again = client.wait_for("the cleared group's task to run again", rerun_done, timeout=RUN_TIMEOUT)
    assert again["state"] == "success", server.task_log(DAG, run_id, "partitions_seg0", first["map_index"], 2)
    assert len(_submissions(jobs_client, job_dir, job_id)) == groups
    assert Counter((e["partition_id"], e["op_index"]) for e in read_events(job_dir, "op_complete")) == ran


def test_marking_a_deferred_group_failed_stops_its_ray_job(rj):
    """The UI's "mark failed" on a deferred partition task: Airflow's triggerer cancels its trigger and
    calls its ``on_kill``, which stops the group's Ray job; the driver records the stop; the other
    groups go on and succeed, and the run fails with nothing exported."""
    from airflow_provider_dj.hooks.ray_jobs import RayJobsClient

    server, client, cluster = rj["server"], rj["client"], rj["cluster"]
    job_id = "rj_mark"
    job_dir = os.path.join(rj["work"], job_id)
    export = os.path.join(rj["exports"], f"{job_id}.jsonl")
    write_faults(job_dir, _hold([0]))  # group 0 is held mid-partition; the other groups run through
    client.set_paused(DAG, False)
    run_id = client.trigger(DAG, {"job_id": job_id, "export_path": export})["dag_run_id"]

    def held():
        """Group 0's task deferred, and its partition held mid-op inside its Ray job."""
        states = {
            t["map_index"]: t["state"] for t in client.task_instances(DAG, run_id) if t["task_id"] == "partitions_seg0"
        }
        group0_held = os.path.exists(os.path.join(job_dir, "_fault_injection.fired", "fault0_0"))
        return states if states.get(0) == "deferred" and group0_held else None

    client.wait_for(f"{DAG}/{run_id}'s group 0 to be deferred and held mid-partition", held, timeout=RUN_TIMEOUT)
    jobs_client = RayJobsClient(cluster.address)
    marked = ray_jobs.latest_submission(ray_jobs.read_record(job_dir, 0, 0))["submission_id"]
    client.set_task_instance_state(DAG, run_id, "partitions_seg0", 0, "failed")
    try:
        client.wait_for(
            f"Ray job {marked} to stop",
            lambda: jobs_client.status(marked) in ("STOPPED", "FAILED") or None,
            timeout=120,
        )
    except TimeoutError as exc:
        raise AssertionError(
            f"{exc}\nstatus {jobs_client.status(marked)}\n{jobs_client.logs_tail(marked)}\n"
            f"{open(os.path.join(server.home, 'triggerer-2.log'), errors='replace').read()[-3000:] if os.path.exists(os.path.join(server.home, 'triggerer-2.log')) else server.component_lines('triggerer')}\n"
            f"{cluster.log()}"
        ) from None
    assert jobs_client.status(marked) == "STOPPED", jobs_client.logs_tail(marked)
    entry = ray_jobs.latest_submission(ray_jobs.read_record(job_dir, 0, 0))
    assert (entry["state"], entry["stopped_by"]) == ("stopped", "stop_job"), entry

    open(os.path.join(job_dir, RELEASE), "w").close()
    run = client.wait_run(DAG, run_id, timeout=RUN_TIMEOUT)
    assert run["state"] == "failed", server.log_tail()
    states = {
        t["map_index"]: t["state"] for t in client.task_instances(DAG, run_id) if t["task_id"] == "partitions_seg0"
    }
    assert states[0] == "failed" and {s for i, s in states.items() if i != 0} == {"success"}
    others = [s for s in _submissions(jobs_client, job_dir, job_id) if s.submission_id != marked]
    assert len(others) == PARTS - 1 and {str(j.status.value) for j in others} == {"SUCCEEDED"}
    assert not os.path.exists(export)


def _jsonl(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


def _edges(path: str) -> pa.Table:
    with pa.memory_map(path) as src:
        return pa.ipc.open_file(src).read_all()


def _stage(job_dir: str, op_index: int) -> str:
    (stage,) = glob.glob(os.path.join(job_dir, "global_shards", f"op_{op_index:03d}_*"))
    return stage


def _cross_partition_duplicates(job_dir: str, op_index: int, bounds: list[int]) -> int:
    """Rows the op removed whose kept match (lineage's ``dup_of_row``) lies in another partition."""
    import pyarrow.parquet as pq

    def partition(row: int) -> int:
        return next(p for p in range(len(bounds) - 1) if bounds[p] <= row < bounds[p + 1])

    found = 0
    for path in glob.glob(os.path.join(job_dir, "lineage", "partition_*", f"op_{op_index:03d}.parquet")):
        for r in pq.read_table(path).to_pylist():
            if r.get("dup_of_row") is not None and r["dup_of_row"] >= 0:
                found += partition(r["input_row"]) != partition(r["dup_of_row"])
    return found


def test_three_nodes_dedup_exact_and_near_duplicates_in_key_shards_as_the_single_process_step(rj):
    """Exact then near deduplication on the three-node cluster, each global step in 3 key shards as a
    Ray Job, the export as a Ray Job: the export and lineage are byte for byte the engine's run of the
    recipe in this process (the step in one process), the kept rows are Data-Juicer 1.6.1's, the
    duplicates span partitions and key shards, and the steps' tasks ran on more than one node.

    Data-Juicer's reference (``pipeline__document_minhash_deduplicator``) is the mapper and MinHash
    alone: an exact duplicate after the mapper has its earlier copy's MinHash signature, so it is in
    that copy's cluster, never the first of it, and bridges nothing the copy does not; removing it
    first leaves MinHash's kept rows as they were."""
    from ray.util.state import list_tasks

    from airflow_provider_dj.engine import run_job
    from airflow_provider_dj.engine.storage.context import JobContext
    from airflow_provider_dj.hooks.ray_jobs import RayJobsClient

    server, client, cluster = rj["server"], rj["client"], rj["cluster"]
    job_id = DEDUP_JOB
    job_dir = os.path.join(rj["work"], job_id)
    export = os.path.join(rj["exports"], f"{job_id}.jsonl")
    run = client.wait_run(DEDUP_DAG, rj["dedup_run"], timeout=RUN_TIMEOUT)  # triggered by the fixture
    assert run["state"] == "success", server.log_tail()

    # The export and the lineage: the engine's bytes with the step in one process (no key shards).
    reference = run_job(
        rj["dedup_recipe"], job_id=f"{job_id}_ref", workers=1, overrides={"export_path": export[:-6] + "_ref.jsonl"}
    )
    ref_dir = os.path.join(rj["work"], f"{job_id}_ref")
    assert not read_events(ref_dir, "global_op_shards")  # the reference's steps ran in one process
    with open(export, "rb") as ours, open(reference.export_path, "rb") as engine:
        assert ours.read() == engine.read()
    lineage = sorted(os.path.relpath(p, ref_dir) for p in glob.glob(os.path.join(ref_dir, "lineage", "*", "*")))
    assert lineage == sorted(os.path.relpath(p, job_dir) for p in glob.glob(os.path.join(job_dir, "lineage", "*", "*")))
    for rel in lineage:
        with open(os.path.join(job_dir, rel), "rb") as ours, open(os.path.join(ref_dir, rel), "rb") as engine:
            assert ours.read() == engine.read(), rel
    want = _jsonl(os.path.join(NEAR_DEDUP, "expected", "pipeline__document_minhash_deduplicator.jsonl"))
    assert [(r["id"], r["text"]) for r in _jsonl(export)] == [(r["id"], r["text"]) for r in want]

    # Both steps in 3 key shards; exact and near duplicates across partitions and key shards.
    plan = JobContext(job_dir).plan
    exact, near = (s.keys_for_global for s in plan.segments[:2])
    assert [plan.ops[exact].name, plan.ops[near].name] == ["document_deduplicator", "document_minhash_deduplicator"]
    shards = {e["op_index"]: e for e in read_events(job_dir, "global_op_shards")}
    assert {i: e["key_shards"] for i, e in shards.items()} == {exact: DEDUP_SHARDS, near: DEDUP_SHARDS}
    parts = JobContext(job_dir).partitioning_info["partitions"]
    bounds = [p["start_row"] for p in parts] + [parts[-1]["end_row"]]
    assert _cross_partition_duplicates(job_dir, exact, bounds) > 0
    assert _cross_partition_duplicates(job_dir, near, bounds) > 0
    for op_index in (exact, near):
        done = [
            _jsonl(p)[0] for p in glob.glob(os.path.join(_stage(job_dir, op_index), "edges", "key_*", "done.json"))
        ]  # one line
        assert len(done) == DEDUP_SHARDS and all(d["edges"] > 0 for d in done), done  # duplicates in every shard
    # A near-duplicate cluster spans key shards: a row matched in bands that hash to different shards,
    # joined only by the components rounds.
    rows_by_shard = []
    for key_dir in sorted(glob.glob(os.path.join(_stage(job_dir, near), "edges", "key_*"))):
        edges = [_edges(p) for p in glob.glob(os.path.join(key_dir, "node_*.arrow"))]
        rows_by_shard.append({v for t in edges for c in ("u", "v") for v in t.column(c).to_pylist()})
    assert any(a & b for i, a in enumerate(rows_by_shard) for b in rows_by_shard[i + 1 :])
    assert glob.glob(os.path.join(_stage(job_dir, near), "components", "round_*"))

    # The groups, both global steps and the export ran as Ray Jobs on the cluster, each once.
    records = sorted(os.listdir(os.path.join(job_dir, "ray_jobs")))
    assert {f"global_op{exact}.json", f"global_op{near}.json", "export.json"} <= set(records), records
    assert {r.split("_", 1)[0] for r in records if r.startswith("seg")} == {"seg0", "seg1", "seg2"}
    for op_index in (exact, near):
        (entry,) = ray_jobs.read_global_record(job_dir, op_index)["submissions"]
        assert entry["state"] == "succeeded" and entry["pid"] != os.getpid(), entry
    (entry,) = ray_jobs.read_export_record(job_dir)["submissions"]
    assert entry["state"] == "succeeded" and entry["pid"] != os.getpid(), entry
    jobs_client = RayJobsClient(cluster.address)
    # The groups', the steps' and the export's submissions (the ones with a record under ray_jobs/).
    submissions = [
        j
        for j in _all_submissions(jobs_client, job_dir, job_id)
        if re.search(r"-(s\d+-g\d+|op\d+|export)(-r\d+)?$", j.submission_id)
    ]
    assert len(submissions) == len(records) and {str(j.status.value) for j in submissions} == {"SUCCEEDED"}
    steps = [j for j in submissions if re.search(r"-op\d+$", j.submission_id)]
    assert len(steps) == 2 and all("engine.runner.global_job" in j.entrypoint for j in steps)

    # Their Ray tasks ran on every node, the steps' shard tasks on more than one (Ray's state API: each
    # task's node; Ray's default scheduling packs a node to half its CPUs, then spreads).
    names = cluster.node_ids()
    ran_on: dict[str, set[str]] = {}
    for job in submissions:
        ray_job_id = jobs_client.info(job.submission_id).job_id
        if ray_job_id is None:
            continue  # a driver that never connected to Ray (a small export writes in its own process)
        for task in list_tasks(address=cluster.address, filters=[("job_id", "=", ray_job_id)], limit=10_000):
            if task.node_id:
                ran_on.setdefault(names.get(task.node_id, task.node_id), set()).add(task.name)
    assert set(ran_on) == {"head", *(name for r in WORKER_RESOURCES for name in r)}, ran_on
    step_tasks = {"scatter_partition", "resolve_key_shard", "commit_partition_mask"}
    assert len([n for n, tasks in ran_on.items() if tasks & step_tasks]) >= 2, ran_on


def _task_process(server: AirflowServer, ti_id: str) -> psutil.Process | None:
    """The task's own process: Airflow's task runner titles it ``airflow worker -- <task instance id>``."""
    for p in psutil.Process(server.proc.pid).children(recursive=True):
        try:
            if f"airflow worker -- {ti_id}" in " ".join(p.cmdline()):
                return p
        except psutil.NoSuchProcess:
            continue
    return None


def test_with_deferral_off_a_killed_task_process_is_retried_and_reattaches(rj):
    """``partition.ray_jobs_deferrable: false``: the partition task waits for its Ray job in its worker
    process, on the server whose other DAGs defer (it has one automatic retry); group 0's task
    process is SIGKILLed (an OOM kill, a pod eviction) while its Ray job is held mid-partition.  The
    Ray job runs on; Airflow retries the task, whose retry attaches to it: one submission per group,
    every op of every partition once, the export the engine's."""
    from airflow_provider_dj.hooks.ray_jobs import RayJobsClient

    server, cluster, client = rj["server"], rj["cluster"], rj["client"]
    job_id = "rj_nodefer"
    job_dir = os.path.join(rj["work"], job_id)
    export = os.path.join(rj["exports"], f"{job_id}.jsonl")
    write_faults(job_dir, _hold([0]))
    client.set_paused(NODEFER_DAG, False)
    run_id = client.trigger(NODEFER_DAG, {"job_id": job_id, "export_path": export})["dag_run_id"]

    def group0() -> dict | None:
        tis = client.task_instances(NODEFER_DAG, run_id)
        return next((t for t in tis if t["task_id"] == "partitions_seg0" and t["map_index"] == 0), None)

    def group0_waiting():
        """Group 0's task running (not deferred) in its worker, and its partition held in its Ray job."""
        ti = group0()
        held = os.path.exists(os.path.join(job_dir, "_fault_injection.fired", "fault0_0"))
        if ti is not None and ti["state"] == "deferred":
            raise AssertionError(f"group 0 deferred with deferral off: {ti}")
        return ti if ti is not None and held and ti["state"] == "running" and _task_process(server, ti["id"]) else None

    first = client.wait_for(
        f"{NODEFER_DAG}/{run_id}'s group 0 to wait in its worker", group0_waiting, timeout=RUN_TIMEOUT
    )
    marked = ray_jobs.latest_submission(ray_jobs.read_record(job_dir, 0, 0))["submission_id"]
    victim = _task_process(server, first["id"])
    victim.send_signal(signal.SIGKILL)
    psutil.wait_procs([victim], timeout=20)
    jobs_client = RayJobsClient(cluster.address)
    assert jobs_client.status(marked) == "RUNNING"  # the driver is on the cluster, not in the task

    def retried_and_waiting():
        ti = group0()
        return ti if ti["try_number"] == first["try_number"] + 1 and ti["state"] == "running" else None

    client.wait_for("group 0's retry to run", retried_and_waiting, timeout=RUN_TIMEOUT)
    open(os.path.join(job_dir, RELEASE), "w").close()
    run = client.wait_run(NODEFER_DAG, run_id, timeout=RUN_TIMEOUT)
    assert run["state"] == "success", server.log_tail()

    submissions = _submissions(jobs_client, job_dir, job_id)
    assert len(submissions) == PARTS and {str(j.status.value) for j in submissions} == {"SUCCEEDED"}
    record = ray_jobs.read_record(job_dir, 0, 0)
    assert ray_jobs.latest_submission(record)["submission_id"] == marked  # the retry attached, submitted nothing
    ran = Counter((e["partition_id"], e["op_index"]) for e in read_events(job_dir, "op_complete"))
    assert ran == Counter({(p, op): 1 for p in range(PARTS) for op in range(2)})
    tries = {
        t["map_index"]: t["try_number"]
        for t in client.task_instances(NODEFER_DAG, run_id)
        if t["task_id"] == "partitions_seg0"
    }
    assert tries[0] == first["try_number"] + 1 and all(n == first["try_number"] for i, n in tries.items() if i != 0)

    _assert_export_is_the_engines(rj["nodefer_recipe"], export, "rj_nodefer_ref")
