"""Night 2 under the scheduler: ``bench nightly``'s nights as DAG runs of a real ``airflow standalone``.

One server (the e2e tests' helper, ``tests/e2e/airflow_server.py``: its own home, SQLite, LocalExecutor,
the embedded Ray head) with one recipe DAG (``partition.align: file``, ``reuse_across_jobs``, the
``--layout`` export layout).  DAG runs are triggered over REST and run by the scheduler one after
another, each with its own job id, export path and work dir through ``dag_run.conf``:

* ``empty``: an empty input file: the fixed cost of a DAG run (its preflight, validate and export tasks,
  no partition task);
* ``night1``: ``--files`` files of ``--rows`` rows; then night 2's file arrives (``--growth`` new rows, some
  exact and some near duplicates of night-1 rows);
* ``night2``: every file, in night 1's work dir (its checkpoints reused);
* ``scratch``: every file, in a fresh work dir.

A run's time is Airflow's own: the DAG run's start date to its end date.  Marginal = run - empty.
The issue's figure is night 2 / scratch, marginal.  Night 2's export must equal the scratch run's (the
shards joined through the manifest, for ``partition_shards``).

    .venv/bin/python -m bench nightly-scheduler --rows 600000 --files 10 --size 30000
    .venv/bin/python -m bench nightly-scheduler --rows 20000 --files 4 --size 2500   # quick
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile

import pendulum

from airflow_provider_dj.testing.sample_corpus import write_growth_file
from bench.nightly_bench import LAYOUTS, PROCESS, export_digest, integer_ids, ratio, write_night1_inputs
from bench.report import md_table

DAG = "bench_nightly_sched"
RUN_TIMEOUT_S = 3600


def write_recipe(recipes: str, data: str, exports: str, work: str, size: int, layout: str) -> str:
    path = os.path.join(recipes, f"{DAG}.yaml")
    with open(path, "w") as fh:
        fh.write(
            f"project_name: {DAG}\ndataset_path: {data}\nexport_path: {os.path.join(exports, 'default.jsonl')}\n"
            f"work_dir: {work}\nexport_layout: {layout}\n"
            f"partition: {{mode: manual, size: {size}, align: file}}\n"
            f"intermediate_storage: {{reuse_across_jobs: true}}\n{PROCESS}"
        )
    return path


def run_dag(client, name: str, conf: dict) -> dict:
    """Trigger one DAG run and wait for it; its Airflow-recorded duration and task instance count."""
    run_id = client.trigger(DAG, {"job_id": name, **conf})["dag_run_id"]
    run = client.wait_run(DAG, run_id, timeout=RUN_TIMEOUT_S)
    if run["state"] != "success":
        raise SystemExit(f"DAG run {name} ended {run['state']}")
    wall = (pendulum.parse(run["end_date"]) - pendulum.parse(run["start_date"])).total_seconds()
    tis = client.task_instances(DAG, run_id)
    mapped = sum(1 for t in tis if t["task_id"].startswith("partitions_seg"))
    print(f"{name}: {wall:.2f} s, {len(tis)} task instances ({mapped} partition tasks)", flush=True)
    return {"wall": wall, "tasks": len(tis), "partition_tasks": mapped}


def report(args, runs: dict, same: bool, load_before, load_after) -> None:
    empty = runs["empty"]["wall"]
    rows = []
    for name in ("empty", "night1", "night2", "scratch"):
        r = runs[name]
        marginal = None if name == "empty" else r["wall"] - empty
        rows.append(
            [name, f"{r['wall']:.2f} s", "-" if marginal is None else f"{marginal:.2f} s", str(r["partition_tasks"])]
        )
    print(f"\n## night 2 under the scheduler ({args.rows:,} rows, export_layout {args.layout})")
    print(md_table(["DAG run", "start to end", "marginal (less empty)", "partition tasks"], rows))
    n2, sc = runs["night2"]["wall"] - empty, runs["scratch"]["wall"] - empty
    print(f"\nnight 2 / scratch, marginal, export included: {ratio(n2, sc)} (aim: at most 0.15)")
    print(f"night 2's export equals the scratch run's: {same}")
    print(f"load average before {load_before}, after {load_after}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=600_000, help="night 1's rows")
    ap.add_argument("--files", type=int, default=10, help="night 1's input files")
    ap.add_argument("--size", type=int, default=30_000, help="partition.size (rows)")
    ap.add_argument("--growth", type=float, default=0.05, help="night 2's new rows, as a share of night 1's")
    ap.add_argument("--layout", choices=LAYOUTS, default="partition_shards", help="export_layout")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir (printed)")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    from tests.e2e.airflow_server import AirflowServer

    args = parse_args(argv)
    root = tempfile.mkdtemp(prefix="dj_nightly_sched_")
    load_before = " ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"rows {args.rows:,} in {args.files} files, partition.size {args.size:,}; load before {load_before}")
    recipes, exports, home = (os.path.join(root, d) for d in ("recipes", "exports", "airflow"))
    for d in (recipes, exports):
        os.makedirs(d)
    server = None
    try:
        empty_dir, data, texts = write_night1_inputs(root, args.rows, args.files)
        work = os.path.join(root, "work")
        write_recipe(recipes, data, exports, work, args.size, args.layout)
        server = AirflowServer(home=home, sql_alchemy_conn=f"sqlite:///{home}/airflow.db", recipes_dir=recipes)
        client = server.start()
        print(f"airflow standalone healthy in {server.started_s:.1f} s", flush=True)
        client.wait_dag(DAG)
        client.set_paused(DAG, False)
        ext = ".jsonl"

        def conf(name: str, **over) -> dict:
            return {"export_path": os.path.join(exports, name + ext), "work_dir": work, **over}

        runs = {"empty": run_dag(client, "empty", conf("empty", dataset_path=empty_dir))}
        runs["night1"] = run_dag(client, "night1", conf("night1"))
        grown = os.path.join(data, f"part_{args.files:04d}.jsonl")
        write_growth_file(grown, texts, int(args.rows * args.growth), seed=1000)
        integer_ids(grown, base=1000 * 10**7)
        runs["night2"] = run_dag(client, "night2", conf("night2"))
        runs["scratch"] = run_dag(client, "scratch", conf("scratch", work_dir=os.path.join(root, "scratch_work")))
        same = export_digest(os.path.join(exports, "night2" + ext)) == export_digest(
            os.path.join(exports, "scratch" + ext)
        )
        report(args, runs, same, load_before, " ".join(f"{x:.1f}" for x in os.getloadavg()))
        return 0 if same else 1
    finally:
        if server is not None:
            server.stop()
        if args.keep:
            print(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
