"""The sharded global step at scale, for ``python -m bench at-scale``: measured per-row costs, planned shards.

``measure_shard_costs`` runs one real job (``document_deduplicator`` only, in this process, one worker)
with the step forced into key shards and reads the ``global_op_shards`` event: the seconds each stage
took per row on one core, the edges per row, and the bytes the stage folder holds per row.
``plan_shards`` applies the real planner (``engine.planning.global_memory.planned_shards``) to a corpus
size and predicts, from those costs, the tasks, each task's memory, the bytes written between stages
and the step's time on an assumed cluster.
"""

from __future__ import annotations

import glob
import json
import math
import os

RECIPE = """\
project_name: at_scale_shards
dataset_path: {data}
export_path: {out}/export_shards.jsonl
work_dir: {out}/work
text_keys: text
partition:
  mode: manual
  num_of_partitions: 8
process:
  - document_deduplicator:
      lowercase: true
"""
MEASURED_SHARDS = 4
STAGES = ("scatter", "resolve", "components", "masks")


def measure_shard_costs(out: str, data: str, rows: int) -> dict:
    """Per-row costs of the sharded step, from one real job over ``rows`` rows of ``data``."""
    from airflow_provider_dj import settings
    from airflow_provider_dj.engine import run_job

    recipe = os.path.join(out, "shards.yaml")
    with open(recipe, "w") as fh:
        fh.write(RECIPE.format(data=data, out=out))
    old = os.environ.get("DJ_GLOBAL_STEP_SHARDS")
    os.environ["DJ_GLOBAL_STEP_SHARDS"] = str(MEASURED_SHARDS)
    settings.reset()
    try:
        result = run_job(recipe, job_id="shards", workers=1)
    finally:
        if old is None:
            os.environ.pop("DJ_GLOBAL_STEP_SHARDS", None)
        else:
            os.environ["DJ_GLOBAL_STEP_SHARDS"] = old
        settings.reset()
    event = _shards_event(result.job_dir)
    stage_bytes = sum(_tree_bytes(p) for p in glob.glob(os.path.join(result.job_dir, "global_shards", "*")))
    return {
        "rows": rows,
        "seconds_per_row": {s: event["durations"][s] / rows for s in STAGES},
        "edges_per_row": event["edges"] / rows,
        "stage_bytes_per_row": stage_bytes / rows,
    }


def _tree_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, n)) for d, _, names in os.walk(path) for n in names)


def _shards_event(job_dir: str) -> dict:
    for path in glob.glob(os.path.join(job_dir, "events_*.jsonl")):
        with open(path) as fh:
            for line in fh:
                event = json.loads(line)
                if event.get("event_type") == "global_op_shards":
                    return event
    raise RuntimeError(f"no global_op_shards event in {job_dir}: the step did not run in shards")


def plan_shards(rows: int, partitions: int, costs: dict, cluster_cores: int, budget_mb: int) -> dict:
    """The sharded step of an exact deduplicator over ``rows`` rows in ``partitions`` partitions."""
    from airflow_provider_dj.engine.planning.global_memory import (
        BYTES_PER_ITEM,
        KEY_BYTES_PER_ROW,
        MASK_BYTES_PER_ROW,
        WORKER_OWN_BYTES,
        planned_shards,
    )
    from airflow_provider_dj.ops.registry import create_op

    op_impl = create_op("document_deduplicator", {"lowercase": True}, "text")
    shards = _with_budget(budget_mb, lambda: planned_shards(op_impl, rows))
    k = max(shards, 1)
    node_shards = min(k, partitions)
    core_seconds = sum(costs["seconds_per_row"].values()) * rows
    # each stage is as wide as its task count: partitions (scatter, masks) or key shards (resolve)
    widths = {"scatter": partitions, "resolve": k, "components": node_shards, "masks": partitions}
    wall = sum(costs["seconds_per_row"][s] * rows / min(cluster_cores, widths[s]) for s in STAGES)
    return {
        "key_shards": shards,
        "node_shards": node_shards,
        "tasks": 2 * partitions + k if shards else 1,
        "scatter_reads": partitions * k if shards else 0,
        # the single-process step's memory when not sharded, else one key shard task's: its data and its worker
        "shard_task_gib": (rows * KEY_BYTES_PER_ROW if not shards else rows * BYTES_PER_ITEM / k + WORKER_OWN_BYTES)
        / 2**30,
        "mask_task_mib": math.ceil(rows / partitions) * MASK_BYTES_PER_ROW / 2**20,
        "spilled_gb": rows * costs["stage_bytes_per_row"] / 1e9,
        "core_hours": core_seconds / 3600,
        "step_minutes": wall / 60,
    }


def _with_budget(budget_mb: int, fn):
    """``fn()`` with ``[dj] global_shard_memory_mb`` set to ``budget_mb`` (the planner reads settings)."""
    from airflow_provider_dj import settings

    old = os.environ.get("DJ_GLOBAL_SHARD_MEMORY_MB")
    os.environ["DJ_GLOBAL_SHARD_MEMORY_MB"] = str(budget_mb)
    settings.reset()
    try:
        return fn()
    finally:
        if old is None:
            os.environ.pop("DJ_GLOBAL_SHARD_MEMORY_MB", None)
        else:
            os.environ["DJ_GLOBAL_SHARD_MEMORY_MB"] = old
        settings.reset()


def shard_verdicts(plan: dict, budget_mb: int) -> list[str]:
    """What the sharded step meets first at this size."""
    out = []
    if plan["shard_task_gib"] * 1024 > budget_mb * 1.001:
        out.append(f"a key shard needs {plan['shard_task_gib']:.2f} GiB > budget {budget_mb} MiB")
    if plan["scatter_reads"] > 10_000_000:
        out.append(
            f"{plan['scatter_reads']:,} scatter-batch reads (every key shard reads every partition's file): "
            "group the scatter files before resolving"
        )
    return out
