"""The peak memory of every process of a DAG run in Ray Jobs mode under ``airflow standalone``, by kind.

The recipe and corpus of ``bench memory-at-scale`` (one deduplicator over N short rows, about 20% exact
copies; ``--op minhash`` for near duplicates), ``checkpoint: {strategy: disabled}``, every other setting
at its default, as the DAG the provider generates, run by a real ``airflow standalone`` (LocalExecutor,
SQLite) whose ``ray`` connection names the dashboard of a separate Ray cluster on loopback
(tests/integration/ray_jobs_cluster.py; ``--nodes 3`` adds two worker nodes of one CPU each).  That is
Ray Jobs mode: planning, each partition group, the global step and the export are Ray Jobs; the Airflow
tasks submit them and defer, and read back what the jobs wrote.  The run is triggered and watched over
the REST API.

Every ``--interval`` seconds psutil reads the RSS of every process under the server and under the
cluster's nodes, and sorts each by what it is, from its process title:

* Airflow's **task processes**: ``airflow task runner`` (the task's code: the operator) and ``airflow
  task supervisor`` (its parent, which talks to the API server): what issue 35 wants flat at 300 MB;
* the executor's worker processes, the scheduler, the API server, the DAG processor and the triggerer;
* the **Ray Jobs' drivers** (``python -m airflow_provider_dj.engine.runner.<kind>_job``), Ray's workers
  (``ray::<task>``), and Ray's daemons (raylet, GCS, dashboard, agents).

The task runner's unique memory (USS, what it does not share with the process it was forked from) is
read too.  Per run: the peaks by kind, each task id's largest task runner, the largest Ray worker (and
its task), the largest driver, rows exported against the distinct texts the generator made, wall time.
Written: ``bench/results/memory_ray_jobs/memory_ray_jobs.json`` and ``.md``.

    .venv/bin/python -m bench memory-ray-jobs --rows 10000000,30000000,100000000
    .venv/bin/python -m bench memory-ray-jobs --rows 200000 --nodes 3         # a quick look

Each size starts its own cluster and server (a fresh home, database and job directory); corpora and
job directories go under ``--tmp`` and are deleted after each size unless ``--keep``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time

import psutil

from bench._proc import RESULTS_DIR
from bench.memory_at_scale import (
    OPS,
    RECIPE,
    _corpus,
    _count_lines,
    _dir_size,
    _events,
    _peak_by_kind,
    _sizes,
    code_state,
    log,
)
from bench.memory_at_scale import shard_info as global_shards
from bench.report import md_table, write_json, write_text

MiB = 2**20
DAG = "memory_ray_jobs"
JOB_ID = "job"

#: kinds of process, in the order the report lists them
TASK_RUNNER, SUPERVISOR = "airflow task runner", "airflow task supervisor (executor worker)"
SCHEDULER, API, DAG_PROC, TRIGGERER, AIRFLOW_OTHER = (
    "airflow scheduler",
    "airflow api-server",
    "airflow dag-processor",
    "airflow triggerer",
    "airflow (other)",
)
DRIVER, RAY_WORKER, RAY_DAEMON = "ray job driver", "ray worker", "ray daemon"
KINDS = (TASK_RUNNER, SUPERVISOR, SCHEDULER, API, DAG_PROC, TRIGGERER, AIRFLOW_OTHER)
KINDS += (DRIVER, RAY_WORKER, RAY_DAEMON)
#: the processes whose peak must stay flat: the Airflow worker's part of each task
TASK_KINDS = (TASK_RUNNER, SUPERVISOR)

#: Airflow 3's LocalExecutor: each executor worker process supervises the workload it runs (title
#: ``airflow worker -- LocalExecutor: <workload>``, ``<idle>`` between workloads) and forks the task
#: runner, which names itself ``airflow worker -- <task instance id>`` once it starts.
_EXECUTOR_TITLE, _RUNNER_TITLE = "airflow worker -- LocalExecutor", "airflow worker -- "
_AIRFLOW_TITLES = (
    (TRIGGERER, "triggerer"),
    (DAG_PROC, "dag-processor"),
    (DAG_PROC, "dag processor"),
    (SCHEDULER, "scheduler"),
    (API, "api-server"),
    (API, "api_server"),
    (API, "uvicorn"),
)


def classify(cmd: str, name: str, under: str, parent_cmd: str = "") -> tuple[str, str]:
    """(kind, short name) of a process under ``under`` ("airflow" or "ray") from its title and name, and
    its parent's title: a child of an executor worker is a task runner, whatever it calls itself yet."""
    if under == "ray":
        if "airflow_provider_dj.engine.runner." in cmd:
            module = cmd.split("airflow_provider_dj.engine.runner.", 1)[1].split()[0]
            return DRIVER, module
        if name.startswith("ray::") or cmd.startswith("ray::"):
            return RAY_WORKER, (cmd or name).split()[0]
        if "default_worker.py" in cmd:
            return RAY_WORKER, "ray::IDLE"
        return RAY_DAEMON, name
    cmd = cmd.strip()
    if parent_cmd.strip().startswith(_EXECUTOR_TITLE):
        forked = not cmd.startswith(_RUNNER_TITLE) or cmd.startswith(_EXECUTOR_TITLE)
        return TASK_RUNNER, "(starting)" if forked else cmd[len(_RUNNER_TITLE) :].strip()
    if cmd.startswith(_EXECUTOR_TITLE):
        return SUPERVISOR, (cmd.split(":", 1)[1].strip() if ":" in cmd else "") or "<idle>"
    for kind, marker in _AIRFLOW_TITLES:
        if marker in cmd:
            return kind, cmd[:120]
    return AIRFLOW_OTHER, cmd[:120] or name


class SystemSampler(threading.Thread):
    """Every ``interval`` s: the RSS of every process descended from ``roots`` (name -> pid), each sorted
    by :func:`classify`; per process its peak (and, for task runners, its USS at that peak), per sample
    the sum by kind."""

    def __init__(self, roots: dict[str, list[int]], interval: float) -> None:
        super().__init__(daemon=True)
        self.roots, self.interval = roots, interval
        self.stop = threading.Event()
        self.t0 = time.time()
        self.procs: dict[int, dict] = {}
        self.peak_sum, self.peak_sum_by_kind, self.samples = 0, {}, 0
        #: per sample: (epoch s, largest task runner RSS, largest driver RSS, largest Ray worker RSS, sum)
        self.timeline: list[tuple[float, int, int, int, int]] = []

    def _members(self) -> list[tuple[psutil.Process, str]]:
        out = []
        for under, pids in self.roots.items():
            for pid in pids:
                try:
                    top = psutil.Process(pid)
                    out += [(p, under) for p in [top, *top.children(recursive=True)]]
                except psutil.Error:
                    continue
        return out

    def run(self) -> None:
        while not self.stop.is_set():
            self.sample()
            self.stop.wait(self.interval)

    def sample(self) -> None:
        now = time.time()
        total, by_kind, largest = 0, {}, {TASK_RUNNER: 0, DRIVER: 0, RAY_WORKER: 0}
        for p, under in self._members():
            try:
                parent = p.parent()
                parent_cmd = " ".join(parent.cmdline()) if parent is not None else ""
                kind, name = classify(" ".join(p.cmdline()), p.name(), under, parent_cmd)
                rss = p.memory_info().rss
            except psutil.Error:
                continue
            rec = self.procs.get(p.pid)
            if rec is None or (rec["kind"] == AIRFLOW_OTHER and kind != AIRFLOW_OTHER):
                rec = self.procs[p.pid] = {"pid": p.pid, "kind": kind, "name": name, "peak_rss": 0, "tasks": []}
            if name not in rec["tasks"] and name != "(starting)":
                rec["tasks"].append(name)
            total += rss
            by_kind[kind] = by_kind.get(kind, 0) + rss
            if kind in largest:
                largest[kind] = max(largest[kind], rss)
            if rss > rec["peak_rss"]:
                rec.update(peak_rss=rss, peak_at_s=round(now - self.t0, 1), name_at_peak=name)
                if kind == TASK_RUNNER:
                    try:
                        rec["uss_at_peak"] = p.memory_full_info().uss
                    except psutil.Error:
                        pass
        self.samples += 1
        self.timeline.append((now, largest[TASK_RUNNER], largest[DRIVER], largest[RAY_WORKER], total))
        if total > self.peak_sum:
            self.peak_sum, self.peak_sum_by_kind = total, by_kind


# --- one run --------------------------------------------------------------------------------------------
def _write_recipe(recipes: str, data: str, export: str, work: str, op: str) -> str:
    path = os.path.join(recipes, f"{DAG}.yaml")
    with open(path, "w") as fh:
        fh.write(
            RECIPE.replace("project_name: memory_at_scale", f"project_name: {DAG}").format(
                data=data, export=export, work=work, process=OPS[op]
            )
        )
    return path


def _env_for_server(cluster, budget_mb: int | None, groups: int) -> dict:
    conn = {"conn_type": "ray", "host": "http://127.0.0.1", "port": int(cluster.address.rsplit(":", 1)[1])}
    env = {
        "AIRFLOW_CONN_RAY_DEFAULT": json.dumps(conn),
        "RAY_AUTH_MODE": "token",  # the cluster's auth: the Ray Jobs client sends the token
        "DJ_TASK_RETRIES": "0",  # a failure ends the run: the bench reports it
        "DJ_MAX_GROUPS_PER_SEGMENT": str(groups),
    }
    if budget_mb is not None:
        env["DJ_GLOBAL_SHARD_MEMORY_MB"] = str(budget_mb)
    return env


def run_one(label: str, data: str, corpus: dict, tmp: str, args: argparse.Namespace) -> dict:
    """One DAG run of ``corpus`` in Ray Jobs mode on a fresh cluster and server, sampled throughout."""
    from tests.e2e.airflow_server import AirflowServer
    from tests.integration.ray_jobs_cluster import RayJobsCluster

    root = os.path.join(tmp, label)
    recipes, work = os.path.join(root, "recipes"), os.path.join(root, "work")
    export, home = os.path.join(root, "export.jsonl"), os.path.join(root, "airflow")
    os.makedirs(recipes)
    _write_recipe(recipes, data, export, work, args.op)
    workers = ({"node_b": 1}, {"node_c": 1}) if args.nodes == 3 else ()
    os.environ["RAY_AUTH_MODE"] = "token"
    cluster = RayJobsCluster(num_cpus=args.head_cpus, worker_resources=workers).start()
    server = AirflowServer(
        home=home,
        sql_alchemy_conn=f"sqlite:///{home}/airflow.db",
        recipes_dir=recipes,
        extra_env=_env_for_server(cluster, args.budget_mb, args.groups),
    )
    sampler = None
    try:
        client = server.start()
        log(f"  airflow standalone healthy in {server.started_s:.0f} s; Ray Jobs at {cluster.address}")
        client.wait_dag(DAG)
        client.set_paused(DAG, False)
        roots = {"airflow": [server.proc.pid], "ray": [cluster.proc.pid] + [w.pid for w in cluster.workers]}
        sampler = SystemSampler(roots, args.interval)
        sampler.start()
        t0 = time.perf_counter()
        run_id = client.trigger(DAG, {"job_id": JOB_ID})["dag_run_id"]
        run = client.wait_run(DAG, run_id, timeout=args.timeout)
        wall = time.perf_counter() - t0
        tis = client.task_instances(DAG, run_id)
        states = [(t["task_id"], t.get("map_index"), t["state"]) for t in tis]
        ti_names = {t["id"]: t["task_id"] + (f"[{t['map_index']}]" if t.get("map_index", -1) >= 0 else "") for t in tis}
    finally:
        if sampler is not None:
            sampler.stop.set()
            sampler.join(timeout=10)
        server.stop()
        cluster.stop()
    return _result(label, corpus, run["state"], wall, states, sampler, work, export, ti_names)


def _result(label, corpus, state, wall, states, sampler, work, export, ti_names) -> dict:
    procs = list(sampler.procs.values())
    job_dir = os.path.join(work, JOB_ID)
    ok = state == "success"
    exported = _count_lines(export) if ok and os.path.exists(export) else None
    runners = [p for p in procs if p["kind"] == TASK_RUNNER and p["peak_rss"]]
    per_task: dict[str, dict] = {}
    for p in runners:
        ti = next((ti_names[t] for t in p["tasks"] if t in ti_names), "(not identified)")
        tid = ti.split("[", 1)[0]
        best = per_task.setdefault(tid, {"task_id": tid, "instances": 0, "peak_rss": 0, "uss_at_peak": None})
        best["instances"] += 1
        if p["peak_rss"] > best["peak_rss"]:
            best.update(peak_rss=p["peak_rss"], uss_at_peak=p.get("uss_at_peak"))
    return {
        "label": label,
        "rows": corpus["rows"],
        "state": state,
        "wall_s": round(wall, 1),
        "rows_exported": exported,
        "rows_expected": corpus["distinct_texts"],
        "export_ok": None if corpus["distinct_texts"] is None else exported == corpus["distinct_texts"],
        "task_states": states,
        "global_shards": global_shards(job_dir),
        "job_dir_bytes": _dir_size(job_dir) if os.path.isdir(job_dir) else None,
        "by_kind": _peak_by_kind(procs),
        "per_task": sorted(per_task.values(), key=lambda t: -t["peak_rss"]),
        "largest": {k: _largest(procs, k) for k in (TASK_RUNNER, SUPERVISOR, DRIVER, RAY_WORKER)},
        "peak_sum_rss": sampler.peak_sum,
        "peak_sum_by_kind": sampler.peak_sum_by_kind,
        "samples": sampler.samples,
        "unsorted": sorted({p["name"] for p in procs if p["kind"] == AIRFLOW_OTHER})[:20],
        "events": {k: len(v) for k, v in _events(job_dir).items()} if os.path.isdir(job_dir) else {},
        "phases_s": _phase_starts(job_dir),
        "timeline": sampler.timeline[:: max(1, len(sampler.timeline) // 400)],
    }


#: (what, the event that marks it, first or last of its kind)
_MARKS = (
    ("partitions start", "partition_start", min),
    ("global step starts", "global_op_start", min),
    ("global step ends", "global_op_complete", max),
    ("export starts", "export_start", min),
    ("export ends", "export_complete", max),
)


def _phase_starts(job_dir: str) -> dict[str, float]:
    """Seconds from the job's start (its ``job_start`` event) to each mark of ``_MARKS`` it reached."""
    events = _events(job_dir) if os.path.isdir(job_dir) else {}
    if not events.get("job_start"):
        return {}
    t0 = min(events["job_start"])
    return {name: round(pick(events[ev]) - t0, 1) for name, ev, pick in _MARKS if events.get(ev)}


def _largest(procs: list[dict], kind: str) -> dict | None:
    of_kind = [p for p in procs if p["kind"] == kind]
    if not of_kind:
        return None
    p = max(of_kind, key=lambda q: q["peak_rss"])
    return {"peak_rss": p["peak_rss"], "name": p.get("name_at_peak") or p["name"], "tasks": p["tasks"][:8]}


# --- the report -------------------------------------------------------------------------------------
def _mib(n: int | None) -> str:
    return "-" if n is None else f"{n / MiB:,.0f}"


HEADER = ["rows", "run", "wall s", "K", *KINDS, "sum at peak MiB", "rows exported (expected)"]


def table_rows(results: list[dict]) -> list[list[str]]:
    rows = []
    for r in results:
        shards = r["global_shards"] or {}
        expected = "not known" if r["rows_expected"] is None else f"{r['rows_expected']:,}"
        exported = "-" if r["rows_exported"] is None else f"{r['rows_exported']:,}"
        rows.append(
            [f"{r['rows']:,}", r["state"], f"{r['wall_s']:.0f}", str(shards.get("key_shards", "-"))]
            + [
                f"{_mib(r['by_kind'][k]['largest_peak_rss'])} ({r['by_kind'][k]['processes']})"
                if k in r["by_kind"]
                else "-"
                for k in KINDS
            ]
            + [_mib(r["peak_sum_rss"]), f"{exported} ({expected})"]
        )
    return rows


TASK_HEADER = ["rows", "task id", "instances", "largest task runner RSS MiB", "its USS MiB"]


def task_rows(results: list[dict]) -> list[list[str]]:
    return [
        [f"{r['rows']:,}", t["task_id"], str(t["instances"]), _mib(t["peak_rss"]), _mib(t["uss_at_peak"])]
        for r in results
        for t in r["per_task"]
    ]


def report(results: list[dict]) -> str:
    head = "Largest peak RSS MiB of each kind of process (processes of that kind):\n\n"
    return head + md_table(HEADER, table_rows(results)) + "\n\n" + md_table(TASK_HEADER, task_rows(results))


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", default="10000000,30000000,100000000", help="sizes, comma-separated")
    ap.add_argument("--op", choices=sorted(OPS), default="exact", help="the recipe's one deduplicator")
    ap.add_argument("--nodes", type=int, choices=(1, 3), default=1, help="Ray nodes: a head, or a head and two")
    ap.add_argument("--head-cpus", type=int, default=2, help="the head node's CPUs")
    ap.add_argument("--budget-mb", type=int, default=None, help="DJ_GLOBAL_SHARD_MEMORY_MB (default: the setting's)")
    ap.add_argument(
        "--groups",
        type=int,
        default=32,
        help="[dj] max_groups_per_segment: the Ray Jobs per segment (each pays a driver's and two task starts)",
    )
    ap.add_argument("--interval", type=float, default=0.5, help="seconds between RSS samples")
    ap.add_argument("--timeout", type=float, default=4 * 3600, help="seconds a run may take")
    ap.add_argument("--tmp", default="/tmp", help="where the corpora and job directories go")
    ap.add_argument("--keep", action="store_true", help="keep corpora and job directories (printed)")
    ap.add_argument("--out", default=os.path.join(RESULTS_DIR, "memory_ray_jobs"))
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="dj-bench-rjmem-", dir=args.tmp)
    log(f"free in {args.tmp}: {shutil.disk_usage(args.tmp).free / 2**30:.1f} GiB; sizes {args.rows}")
    results: list[dict] = []
    data = os.path.join(tmp, "in.jsonl")
    try:
        for n in _sizes(args.rows):
            t0 = time.perf_counter()
            corpus = _corpus(args.op, data, n)
            log(f"{n:,} rows: corpus {corpus['bytes'] / 2**30:.2f} GiB in {time.perf_counter() - t0:.0f} s")
            r = run_one(f"rows_{n}", data, corpus, tmp, args)
            r["corpus_bytes"] = corpus["bytes"]
            results.append(r)
            big = r["largest"]
            log(
                f"  {r['state']} in {r['wall_s']:.0f} s; largest task runner "
                f"{_mib((big[TASK_RUNNER] or {}).get('peak_rss'))} MiB, driver "
                f"{_mib((big[DRIVER] or {}).get('peak_rss'))} MiB, Ray worker "
                f"{_mib((big[RAY_WORKER] or {}).get('peak_rss'))} MiB; exported {r['rows_exported']} "
                f"(expected {r['rows_expected']})"
            )
            write_json(os.path.join(out, "memory_ray_jobs.json"), {"code": code_state(), "results": results})
            if not args.keep:
                shutil.rmtree(os.path.join(tmp, f"rows_{n}"), ignore_errors=True)
    finally:
        if args.keep:
            log(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    text = report(results)
    print(text)
    write_text(os.path.join(out, "memory_ray_jobs.md"), text + "\n")
    return 0 if all(r["state"] == "success" and r["export_ok"] is not False for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
