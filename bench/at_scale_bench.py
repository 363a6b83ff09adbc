"""10M, 100M and 1B rows on paper: what each costs and what breaks first, from the real planner.

Nothing here is guessed.  Two parts:

1. **Measured**: the spine recipe (with ``dedup_history``) on a small synthetic corpus, run in this
   process through ``engine.run_job`` twice, with 4 and with 8 partitions over the same rows.  From the
   two job directories it takes the files a partition adds, the bytes a row adds, the events a
   partition adds and their size, and the history index's bytes per exported row.
2. **Planned**: for each corpus size, the recipe's real partition count (``choose_partition_count``,
   automatic mode, the corpus generator's bytes per row), the real execution groups under Airflow's
   ``max_map_length`` (``plan_groups``), the real DAG built from the recipe (its task count, which
   tasks are mapped), and from those the task instances and XComs of one DAG run, the global step's
   key memory (``engine.planning.global_memory``), the job directory, the event log and the history
   index, each scaled from part 1.

3. **The global step in key shards** (``bench/_global_plan.py``): its stages' seconds per row on one
   core and the bytes they write, measured on a real job forced into shards; then, per size, the
   planner's key shards under ``[dj] global_shard_memory_mb``, the tasks, each task's memory, the bytes
   written between stages, and the step's time on an assumed cluster (``--cluster-cores``).

It prints two tables, flags each figure past a limit of this 2-core, 24 GB machine or of Airflow,
and writes JSON.  Usage::

    .venv/bin/python -m bench at-scale [--sizes 10000000 100000000 1000000000 10000000000] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

from bench._global_plan import measure_shard_costs, plan_shards, shard_verdicts
from bench._proc import RESULTS_DIR
from bench._recipes import spine_process_yaml
from bench.report import md_table, write_json

#: The synthetic corpus's JSON bytes per row (bench/run_bench.py's generator, measured at 1M rows).
CORPUS_BYTES_PER_ROW = 660
MACHINE_MEMORY = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
RECIPE = """\
project_name: at_scale_bench
dataset_path: {data}
export_path: {out}/export_{label}.jsonl
work_dir: {out}/work
text_keys: text
partition:
  mode: {mode}
{partition}
dedup_history:
  path: {out}/history_{label}
  ops: [document_deduplicator]
""" + spine_process_yaml(100000)


def _tree(path: str) -> tuple[int, int]:
    files = size = 0
    for d, _, names in os.walk(path):
        for n in names:
            files += 1
            size += os.path.getsize(os.path.join(d, n))
    return files, size


def _events(job_dir: str) -> tuple[int, int]:
    lines = size = 0
    for n in os.listdir(job_dir):
        if n.startswith("events_") and n.endswith(".jsonl"):
            with open(os.path.join(job_dir, n), "rb") as fh:
                data = fh.read()
            lines += data.count(b"\n")
            size += len(data)
    return lines, size


def measure_small_jobs(out: str, rows: int) -> dict:
    """Part 1: per-partition and per-row costs from two real jobs over the same ``rows`` rows."""
    from airflow_provider_dj.engine import run_job
    from airflow_provider_dj.testing.sample_corpus import write_corpus

    data = write_corpus(os.path.join(out, "corpus.jsonl"), rows, seed=42)
    seen = {}
    for parts in (4, 8):
        label = f"p{parts}"
        recipe = os.path.join(out, f"{label}.yaml")
        with open(recipe, "w") as fh:
            fh.write(
                RECIPE.format(data=data, out=out, label=label, mode="manual", partition=f"  num_of_partitions: {parts}")
            )
        result = run_job(recipe, job_id=label, workers=1)
        files, size = _tree(result.job_dir)
        events, event_bytes = _events(result.job_dir)
        history_files, history_bytes = _tree(os.path.join(out, f"history_{label}"))
        seen[parts] = {
            "files": files,
            "bytes": size,
            "events": events,
            "event_bytes": event_bytes,
            "history_bytes": history_bytes,
            "exported": result.rows,
        }
    a, b = seen[4], seen[8]
    per_part_files = (b["files"] - a["files"]) / 4
    per_part_events = (b["events"] - a["events"]) / 4
    return {
        "rows": rows,
        "runs": seen,
        "files_per_partition": per_part_files,
        "files_fixed": a["files"] - 4 * per_part_files,
        "job_dir_bytes_per_row": (a["bytes"] + b["bytes"]) / 2 / rows,
        "events_per_partition": per_part_events,
        "events_fixed": a["events"] - 4 * per_part_events,
        "bytes_per_event": (a["event_bytes"] + b["event_bytes"]) / (a["events"] + b["events"]),
        "history_bytes_per_exported_row": a["history_bytes"] / a["exported"],
        "exported_fraction": a["exported"] / rows,
    }


def dag_shape(recipe_path: str) -> dict:
    """The real DAG of the recipe: its tasks, and which are mapped over the execution groups."""
    from airflow_provider_dj.cli.airflow_env import configure_airflow_env

    configure_airflow_env()
    from airflow_provider_dj.dag_builder.factory import build_dag

    dag = build_dag(recipe_path, dag_id="at_scale_bench")
    mapped = [t.task_id for t in dag.tasks if type(t).__name__ == "MappedOperator"]
    return {"tasks": len(dag.tasks), "mapped": mapped, "unmapped": len(dag.tasks) - len(mapped)}


def plan_at(rows: int, recipe_path: str, shape: dict, small: dict, max_map_length: int) -> dict:
    """Part 2 for one corpus size."""
    from airflow_provider_dj.engine.config.recipe import load_recipe
    from airflow_provider_dj.engine.input.partitioning import choose_partition_count, row_boundaries
    from airflow_provider_dj.engine.planning.global_memory import KEY_BYTES_PER_ROW
    from airflow_provider_dj.engine.planning.plan import plan_groups

    recipe = load_recipe(recipe_path)
    count, how = choose_partition_count(recipe.partition, rows, rows * CORPUS_BYTES_PER_ROW)
    bounds = row_boundaries(rows, count)
    info = {
        "partitions": [
            {"partition_id": i, "start_row": s, "end_row": e, "nbytes": (e - s) * CORPUS_BYTES_PER_ROW}
            for i, (s, e) in enumerate(bounds)
        ]
    }
    groups = plan_groups(info, max_mapped_tasks=max_map_length)
    mapped_tis = len(groups) * len(shape["mapped"])
    exported = rows * small["exported_fraction"]
    return {
        "rows": rows,
        "partitions": count,
        "how": how,
        "groups_per_segment": len(groups),
        "largest_group": max(len(g["partition_ids"]) for g in groups),
        "task_instances": shape["unmapped"] + mapped_tis,
        # validate pushes job_dir, job_id, job_complete and its groups list; every other task instance
        # its return value (operators/).
        "xcoms": 3 + shape["unmapped"] + mapped_tis,
        "validate_xcom_bytes": len(json.dumps(groups)),
        "global_step_gb": rows * KEY_BYTES_PER_ROW / 1e9,
        "job_dir_files": int(small["files_fixed"] + small["files_per_partition"] * count),
        "job_dir_gb": rows * small["job_dir_bytes_per_row"] / 1e9,
        "events": int(small["events_fixed"] + small["events_per_partition"] * count),
        "event_log_mb": (small["events_fixed"] + small["events_per_partition"] * count)
        * small["bytes_per_event"]
        / 1e6,
        "history_index_gb": exported * small["history_bytes_per_exported_row"] / 1e9,
    }


def verdicts(p: dict, max_map_length: int) -> list[str]:
    """What is past a limit at this size (this machine's memory, Airflow's map length)."""
    out = []
    if p["global_step_gb"] * 1e9 > MACHINE_MEMORY:
        out.append(f"one-process global step would need {p['global_step_gb']:.0f} GB: sharded")
    if p["groups_per_segment"] > max_map_length:
        out.append(f"{p['groups_per_segment']} mapped instances > max_map_length {max_map_length}")
    return out or ["fits"]


def _shard_costs(scratch: str, rows: int) -> dict:
    from airflow_provider_dj.testing.sample_corpus import write_corpus

    data = write_corpus(os.path.join(scratch, "shards_corpus.jsonl"), rows, seed=7)
    return measure_shard_costs(scratch, data, rows)


def _print_shards(planned: list[dict], costs: dict, args) -> None:
    per_row = ", ".join(f"{k} {v * 1e6:.2f} µs" for k, v in costs["seconds_per_row"].items())
    print(
        f"global step in shards, measured on {costs['rows']:,} rows (one core): {per_row} a row; "
        f"{costs['stage_bytes_per_row']:.0f} stage bytes a row; assumed cluster: {args.cluster_cores:,} cores, "
        f"budget {args.shard_budget_mb} MB a task",
        file=sys.stderr,
    )
    cols = ["key_shards", "node_shards", "tasks", "scatter_reads", "shard_task_gib", "mask_task_mib", "spilled_gb"]
    cols += ["core_hours", "step_minutes"]
    rows = []
    for x in planned:
        sh = x["shards"]
        cells = [f"{sh[c]:,.2f}" if isinstance(sh[c], float) else f"{sh[c]:,}" for c in cols]
        rows.append(
            [f"{x['rows']:,}", f"{x['partitions']:,}"]
            + cells
            + ["; ".join(shard_verdicts(sh, args.shard_budget_mb)) or "fits"]
        )
    print(md_table(["rows", "partitions"] + cols + ["what it meets first"], rows))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[10_000_000, 100_000_000, 1_000_000_000, 10_000_000_000])
    p.add_argument("--cluster-cores", type=int, default=1280, help="cores of the cluster the step's time assumes")
    p.add_argument("--shard-budget-mb", type=int, default=1024, help="[dj] global_shard_memory_mb")
    p.add_argument("--shard-rows", type=int, default=400_000, help="rows of the job measured in shards (part 3)")
    p.add_argument("--small-rows", type=int, default=20_000, help="rows of the measured jobs (part 1)")
    p.add_argument("--max-map-length", type=int, default=1024, help="Airflow's [core] max_map_length")
    p.add_argument("--out", default=os.path.join(RESULTS_DIR, "at_scale"))
    args = p.parse_args(argv)
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out) as scratch:
        small = measure_small_jobs(scratch, args.small_rows)
        recipe = os.path.join(scratch, "auto.yaml")
        with open(recipe, "w") as fh:
            fh.write(
                RECIPE.format(
                    data=os.path.join(scratch, "corpus.jsonl"), out=scratch, label="auto", mode="auto", partition=""
                )
            )
        shape = dag_shape(recipe)
        planned = [plan_at(n, recipe, shape, small, args.max_map_length) for n in args.sizes]
        costs = _shard_costs(scratch, args.shard_rows)
    for x in planned:
        x["shards"] = plan_shards(x["rows"], x["partitions"], costs, args.cluster_cores, args.shard_budget_mb)
    print(
        f"measured on {small['rows']:,} rows: {small['files_per_partition']:.1f} files and "
        f"{small['events_per_partition']:.1f} events a partition, {small['job_dir_bytes_per_row']:.0f} job-dir "
        f"bytes and {small['history_bytes_per_exported_row']:.1f} history bytes a row",
        file=sys.stderr,
    )
    cols = [
        "rows",
        "partitions",
        "groups_per_segment",
        "task_instances",
        "xcoms",
        "validate_xcom_bytes",
        "global_step_gb",
        "job_dir_files",
        "job_dir_gb",
        "events",
        "event_log_mb",
        "history_index_gb",
    ]
    rows = [[f"{x[c]:,.1f}" if isinstance(x[c], float) else f"{x[c]:,}" for c in cols] for x in planned]
    print(
        md_table(cols + ["verdict"], [r + ["; ".join(verdicts(x, args.max_map_length))] for r, x in zip(rows, planned)])
    )
    _print_shards(planned, costs, args)
    write_json(
        os.path.join(out, "at_scale.json"), {"measured": small, "dag": shape, "shard_costs": costs, "planned": planned}
    )
    return 0
