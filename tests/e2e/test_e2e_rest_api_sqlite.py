"""The REST API scenarios (tests/e2e/rest_api_scenarios.py) on ``airflow standalone`` with a SQLite
metadata DB, and SQLite's own: a REST write waits for the single writer's lock, and several runs of two
recipes at once.  One module per DB, so each DB's server has its own test worker.

One more scenario needs only one server: a job of more partitions (1,100) than Airflow's default
``[core] max_map_length`` (1,024) maps, at the scheduler's default of one partition a group, through
the real scheduler.  The validate task raises the group size so the groups fit (8 of 137 or 138
partitions here: the server sets ``[dj] max_groups_per_segment`` to 8), every mapped instance succeeds,
the plan covers every partition once, the export holds the 1,100 rows in order, and the job view's tab
and JSON answer for the run.  Its own recipe and server settings reach the e2e fixture through
``e2e_extra_recipes`` and ``e2e_server_env``.

Measured on two cores shared with other work (load average in brackets): the module took 176 s
before that scenario (under 1) and 367 s (8-10) and 558 s (8-15) with it, its other scenarios slowed by
the load as well; the scenario's run, trigger to success, took 69-105 s, its job view's tab 0.46-0.70 s
and the job's JSON 0.16-0.31 s.  Why 8 groups and
two at once: a group task costs about 8 s before its first partition, and more concurrent group tasks
than the Ray head's two CPUs make Ray end and restart workers between partitions (docs/benchmarks.md,
"Past 1,024 partitions under the scheduler")."""

import json
import os
import sqlite3
import threading
import time

import httpx

from airflow_provider_dj.engine.jobdir.events import read_events
from tests.e2e.conftest import CLEAN_OPS, recipe_text
from tests.e2e.rest_api_scenarios import *  # noqa: F403 - the scenarios are collected in this module
from tests.e2e.rest_api_scenarios import _explain, _ops_started, _tis
from tests.e2e.rest_client import TERMINAL_RUN_STATES, RestError
from tests.helpers_compare import assert_same_bytes

E2E_DB = "sqlite"


def test_a_rest_write_waits_for_the_sqlite_write_lock_instead_of_failing(e2e):
    """SQLite has one writer at a time; Airflow's components take turns.  A REST call that writes must
    wait while another holds the lock longer than the sqlite3 driver's default 5 s (which answered
    HTTP 500 "Database error": database is locked).  Sent without the client's retries, so the
    server's own wait is what is checked."""
    c = e2e.client
    paused = c.get_dag("e2e_slow")["is_paused"]
    answer: dict = {}

    def patch() -> None:  # a change, so the server must write
        try:
            answer["resp"] = httpx.patch(
                f"{c.base_url}/api/v2/dags/e2e_slow",
                json={"is_paused": not paused},
                headers={"Authorization": f"Bearer {c.token()}"},
                timeout=300,
            )
        except Exception as exc:  # noqa: BLE001 - shown by the assertion below
            answer["error"] = exc

    db = sqlite3.connect(e2e.server.sql_alchemy_conn.removeprefix("sqlite:///"), timeout=120, isolation_level=None)
    try:
        db.execute("BEGIN IMMEDIATE")  # the write lock, as a long transaction of another component holds it
        t = threading.Thread(target=patch)
        t.start()
        t.join(8)  # longer than the driver's default busy timeout
        assert t.is_alive(), f"the write did not wait for the lock: {answer}"
    finally:
        db.execute("ROLLBACK")
        db.close()
    t.join(300)
    assert "resp" in answer and answer["resp"].status_code == 200, answer
    assert answer["resp"].json()["is_paused"] is (not paused)
    assert c.set_paused("e2e_slow", paused)["is_paused"] is paused


# -- several runs at once ------------------------------------------------------------------------------------------

CONCURRENT_RUN_TIMEOUT = 900  # four runs on two cores shared with other test workers


def _wait_run_through_slow_answers(client, dag_id: str, run_id: str) -> dict:
    """Poll until the run ends; a slow answer (the API server waiting for SQLite's write lock) is a reason
    to ask again, not to fail."""
    deadline = time.monotonic() + CONCURRENT_RUN_TIMEOUT
    last = None
    while time.monotonic() < deadline:
        try:
            last = client.dag_run(dag_id, run_id)
        except (httpx.TransportError, RestError) as exc:
            last = exc
        else:
            if last["state"] in TERMINAL_RUN_STATES:
                return last
        time.sleep(2)
    raise AssertionError(f"run {dag_id}/{run_id} did not end in {CONCURRENT_RUN_TIMEOUT}s; last answer: {last!r}")


def _other_recipe_alone(e2e) -> bytes:
    """e2e_other's export run alone, by the engine in this process (the steps every DAG task calls)."""
    from airflow_provider_dj.engine import run_job

    root = os.path.join(e2e.root, "other_alone")
    os.makedirs(root, exist_ok=True)
    recipe = os.path.join(root, "e2e_other.yaml")
    with open(os.path.join(e2e.root, "recipes", "e2e_other.yaml"), encoding="utf-8") as fh:
        text = fh.read()
    with open(recipe, "w", encoding="utf-8") as fh:
        fh.write(text)
    result = run_job(
        recipe, overrides={"export_path": os.path.join(root, "export.jsonl")}, work_dir=root, job_id="alone", workers=1
    )
    with open(result.export_path, "rb") as fh:
        return fh.read()


def test_two_recipes_and_two_job_ids_at_once_export_what_single_runs_export(e2e, reference):
    """Two recipes triggered at the same moment, each twice with its own ``job_id`` and export path, all
    over REST on SQLite (the harder case for concurrent writers).  Runs of one recipe are one DAG, which
    allows one active run (``max_active_runs=1``): the second run of a recipe queues, then runs.  Every
    run succeeds and exports, byte for byte, what the recipe exports run alone."""
    c = e2e.client
    recipes = ("e2e_clean", "e2e_other")
    for dag_id in recipes:
        c.set_paused(dag_id, False)
    runs = {}
    for name in recipes:
        for job in ("a", "b"):
            job_id = f"cc_{name}_{job}"
            export = e2e.export_path(job_id)
            runs[job_id] = (name, c.trigger(name, {"job_id": job_id, "export_path": export})["dag_run_id"], export)
    alone = {"e2e_other": _other_recipe_alone(e2e)}  # while the four runs go on

    finals = {}
    for job_id, (name, run_id, _export) in runs.items():
        finals[job_id] = _wait_run_through_slow_answers(c, name, run_id)
        assert finals[job_id]["state"] == "success", _explain(e2e, name, run_id)

    # Different recipes ran at the same time: their first runs overlap.
    one, two = finals["cc_e2e_clean_a"], finals["cc_e2e_other_a"]
    assert one["start_date"] < two["end_date"] and two["start_date"] < one["end_date"], (one, two)

    alone["e2e_clean"] = reference.export()
    assert alone["e2e_clean"] != alone["e2e_other"] and all(b.count(b"\n") > 50 for b in alone.values())
    for job_id, (name, _run_id, export) in runs.items():
        with open(export, "rb") as fh:
            assert_same_bytes(fh.read(), alone[name], f"{job_id}'s export differs from {name} run alone")
        assert os.path.exists(os.path.join(e2e.job_dir(job_id), "job_summary.json"))
    assert not os.path.exists(e2e.export_path("e2e_other"))  # its own export path was overridden by every run


# -- more partitions than Airflow may map ------------------------------------------------------------------------

MANY_DAG = "e2e_many"
#: Past Airflow's default ``[core] max_map_length`` (1,024), which the server keeps: at the scheduler's
#: default of one partition per group that is 1,100 mapped task instances, a push Airflow refuses.
MANY_PARTS = 1100
AIRFLOW_MAX_MAP_LENGTH = 1024
#: ``[dj] max_groups_per_segment`` on this server (default 256): the planner's cap on the groups of a
#: segment.  Each mapped task instance costs about 8 s before its first partition (task start-up, DAG
#: parse, a Ray worker for the task's Ray job), a one-row partition about 70 ms: 256 groups would be
#: 128 waves of two, 8 groups are four.
MANY_GROUPS = 8
#: Two group tasks at once on the server's two-CPU Ray head.  With four (the default under a scheduler),
#: the four tasks' Ray jobs compete for two CPUs' worth of workers: Ray ends one job's idle worker to
#: start another's, and partitions paid a new worker's start-up again and again (a 16-group run took
#: 301 s at four, 122 s at two).
MANY_CONCURRENT = 2
MANY_RUN_TIMEOUT = 900


def e2e_server_env(root: str, work: str, exports: str) -> dict[str, str]:
    """What the e2e fixture adds to this module's server.  The other scenarios have at most four
    partitions: the group cap changes nothing for them.  The registry of recent jobs in the server's own
    directory, so the job view finds ``many_run`` there, not in a registry shared with other servers."""
    return {"AIRFLOW__DJ__MAX_GROUPS_PER_SEGMENT": str(MANY_GROUPS), "DJ_STATE_DIR": os.path.join(root, "state")}


def _many_data(root: str) -> str:
    return os.path.join(root, "data", f"{MANY_DAG}.jsonl")


def e2e_extra_recipes(root: str, work: str, exports: str) -> dict[str, str]:
    """The e2e fixture writes these recipes beside its own, before the server parses the DAG folder."""
    corpus = os.path.join(os.path.dirname(root), "data", "corpus.jsonl")  # the e2e_inputs fixture's clean corpus
    return {
        HEADKILL_DAG: recipe_text(
            HEADKILL_DAG, corpus, os.path.join(exports, f"{HEADKILL_DAG}.jsonl"), work, 1, CLEAN_OPS
        ),
        MANY_DAG: (
            f"project_name: {MANY_DAG}\ndataset_path: {_many_data(root)}\n"
            f"export_path: {os.path.join(exports, MANY_DAG + '.jsonl')}\nwork_dir: {work}\ntext_keys: text\n"
            f"partition:\n  mode: manual\n  num_of_partitions: {MANY_PARTS}\n"
            f"  max_concurrent_partitions: {MANY_CONCURRENT}\n"
            "process:\n  - whitespace_normalization_mapper:\n"
        ),
    }


def _all_task_instances(client, dag_id: str, run_id: str) -> list[dict]:
    """Every task instance of the run, page by page (the API answers at most 1,000 at a time)."""
    out: list[dict] = []
    while True:
        page = client.request(
            "GET",
            f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances",
            params={"limit": 1000, "offset": len(out)},
        )
        out += page["task_instances"]
        if not page["task_instances"] or len(out) >= page["total_entries"]:
            return out


def test_more_partitions_than_airflow_may_map_run_under_the_scheduler(e2e):
    """1,100 one-row partitions through the real scheduler, with Airflow's default ``max_map_length``
    (1,024) and the scheduler's default of one partition per group: the validate task plans the groups
    within the caps, every mapped instance succeeds, and the export holds every row, in order."""
    from urllib.parse import quote

    c = e2e.client
    data = _many_data(e2e.root)
    os.makedirs(os.path.dirname(data), exist_ok=True)
    with open(data, "w", encoding="utf-8") as fh:  # whitespace to normalize: an em space, a no-break space
        fh.writelines(json.dumps({"id": i, "text": f"\u2003row\u00a0{i}  "}) + "\n" for i in range(MANY_PARTS))
    c.set_paused(MANY_DAG, False)
    export = e2e.export_path("many_run")
    t0 = time.monotonic()
    run_id = c.trigger(MANY_DAG, {"job_id": "many_run", "export_path": export})["dag_run_id"]
    final = c.wait_run(MANY_DAG, run_id, MANY_RUN_TIMEOUT)
    run_s = time.monotonic() - t0
    assert final["state"] == "success", _explain(e2e, MANY_DAG, run_id)

    tis = _all_task_instances(c, MANY_DAG, run_id)
    mapped = sorted(ti["map_index"] for ti in tis if ti["task_id"] == "partitions_seg0")
    assert 1 < len(mapped) <= AIRFLOW_MAX_MAP_LENGTH and mapped == list(range(len(mapped)))
    assert {ti["state"] for ti in tis} == {"success"}, sorted({(ti["task_id"], ti["state"]) for ti in tis})

    job_dir = e2e.job_dir("many_run")
    with open(os.path.join(job_dir, "dag_execution_plan.json"), encoding="utf-8") as fh:
        groups = [g["partition_ids"] for g in json.load(fh)["execution_groups"]]
    assert len(groups) == len(mapped) == MANY_GROUPS
    assert [pid for g in groups for pid in g] == list(range(MANY_PARTS))  # each partition once, in order
    assert max(map(len, groups)) - min(map(len, groups)) <= 1
    # The planner chose one partition a group (the scheduler's default) and the cap raised it.
    (planning,) = read_events(job_dir, "execution_planning")
    size = planning["execution_group_size"]
    assert (size["source"], size["chosen_size"], size["size"]) == ("default", 1, -(-MANY_PARTS // MANY_GROUPS))
    assert size["bounded_by"] == f"[dj] max_groups_per_segment={MANY_GROUPS}"

    with open(export, encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh]
    assert [r["id"] for r in rows] == list(range(MANY_PARTS))
    assert [r["text"] for r in rows] == [f"row {i}" for i in range(MANY_PARTS)]

    # The job view's tab on this run (the plugin is installed with the package): its page and its data.
    view = {}
    for path in (f"/dj-jobs/dag/{MANY_DAG}/run/{quote(run_id, safe='')}", "/dj-jobs/api/job/many_run"):
        t = time.monotonic()
        resp = httpx.get(c.base_url + path, headers={"Authorization": f"Bearer {c.token()}"}, timeout=120)
        view[path] = (resp.status_code, round(time.monotonic() - t, 2), len(resp.content))
    print(f"\n{MANY_PARTS} partitions in {len(mapped)} mapped task instances: run {run_s:.0f} s; job view {view}")
    assert [code for code, _s, _n in view.values()] == [200, 200], view


# -- the embedded Ray head killed mid-run ---------------------------------------------------------------------------

HEADKILL_DAG = "e2e_headkill"
HEADKILL_TIMEOUT = 600
#: Airflow's own retries for this DAG only (a cluster policy): the other scenarios check that a failed
#: partition stays failed (``DJ_TASK_RETRIES=0``) until it is cleared.
E2E_AIRFLOW_LOCAL_SETTINGS = f"""
from datetime import timedelta


def task_policy(task):
    if task.dag_id == {HEADKILL_DAG!r}:
        task.retries = 3
        task.retry_delay = timedelta(0)
"""


def _head_record(e2e) -> dict:
    with open(os.path.join(e2e.server.ray_state_dir, "ray-head.json"), encoding="utf-8") as fh:
        return json.load(fh)


def _task_logs(e2e, dag_id: str, run_id: str) -> str:
    """Every attempt's log of every task of the run, one text."""
    base = os.path.join(e2e.server.home, "logs", f"dag_id={dag_id}", f"run_id={run_id}")
    texts = []
    for folder, _dirs, files in os.walk(base):
        for name in sorted(files):
            with open(os.path.join(folder, name), encoding="utf-8", errors="replace") as fh:
                texts.append(fh.read())
    return "\n".join(texts)


def test_a_killed_embedded_ray_head_is_replaced_and_the_run_succeeds_after_retries(e2e, reference):
    """The scheduler's tasks share one embedded Ray head; kill it under a running partition, as the OOM killer
    does, twice in one run: first only its agents (its raylet exits with them while ``ray start`` and the GCS
    live on), then its whole process group.  Each time the partition's try fails, Airflow retries it, the
    retry finds the head dead, replaces it and resumes from the last committed checkpoint; the run succeeds
    and exports what a clean run exports.  Last in the module: no other run is on the head when it dies.

    The kill points come from the job directory: the partition holds (an injected ``delay``) right after op 1,
    then op 2, commit their checkpoints, and the head is killed while it holds."""
    import signal

    from airflow_provider_dj.hooks.ray_local_head import _session_processes
    from tests.integration.crash_helpers import fired, kill_session, write_faults

    c = e2e.client
    job_id = "headkill_run"
    job_dir = e2e.job_dir(job_id)
    hold = {"point": "after_op", "partition_id": 0, "times": 1, "kind": "delay", "seconds": 300, "until": "never"}
    write_faults(job_dir, [dict(hold, op_index=1), dict(hold, op_index=2)])
    export = e2e.export_path(job_id)
    c.set_paused(HEADKILL_DAG, False)
    run_id = c.trigger(HEADKILL_DAG, {"job_id": job_id, "export_path": export})["dag_run_id"]

    heads = []
    for holding, kill in ((["fault0_0"], "agents"), (["fault0_0", "fault1_0"], "group")):
        c.wait_for(f"the partition to hold at {holding[-1]}", lambda h=holding: fired(job_dir) == h, HEADKILL_TIMEOUT)
        head = _head_record(e2e)
        assert head["pid"] not in [h["pid"] for h in heads], "the head was not replaced after the last kill"
        heads.append(head)
        if kill == "agents":
            agents = [
                p
                for p, (name, _state, _cmd) in _session_processes(head["pid"]).items()
                if name in ("ray::DashboardA", "ray::RuntimeEnv")  # /proc's names are cut at 15 characters
            ]
            assert len(agents) == 2, _session_processes(head["pid"])
            for pid in agents:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:  # already gone: the raylet that the first kill ended took it along
                    pass
        else:
            try:
                os.killpg(head["pid"], signal.SIGKILL)
            except ProcessLookupError:  # pragma: no cover - the group ended on its own: nothing left to kill
                pass
            kill_session(head["pid"])  # and a worker that left the group

    final = c.wait_run(HEADKILL_DAG, run_id, HEADKILL_TIMEOUT)
    assert final["state"] == "success", _explain(e2e, HEADKILL_DAG, run_id)
    assert _tis(e2e, HEADKILL_DAG, run_id)[("partitions_seg0", 0)]["try_number"] == 3
    assert _head_record(e2e)["pid"] not in [h["pid"] for h in heads]

    logs = _task_logs(e2e, HEADKILL_DAG, run_id)
    address = heads[0]["address"]
    assert f"the embedded Ray head at {address} was dead (its raylet is gone); started a new one" in logs
    assert (
        f"the embedded Ray head at {address} was dead (its process {heads[1]['pid']} is gone); started a new one"
        in (logs)
    )
    # Each retry resumed from the checkpoint its failed try committed last and ran only the ops after it
    # (try 2 up to its hold after op 2, where it was killed; try 3 the last op).
    for try_number, resumed_at, ran in ((2, 1, [2]), (3, 2, [3])):
        loads = [
            e["op_index"]
            for e in read_events(job_dir, "checkpoint_load")
            if e.get("partition_id") == 0 and e.get("try_number") == try_number
        ]
        assert loads == [resumed_at]
        assert _ops_started(job_dir, 0, try_number) == ran
    with open(export, "rb") as fh:
        assert_same_bytes(fh.read(), reference.export())
