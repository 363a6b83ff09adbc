"""``dag_execution_plan.json``: the plan a job runs, as people and tools read it.

Why a file: the DAG's shape lives in Airflow and the work's shape in the
engine; this document ties them together for one job — every (op,
partition) node, the segments between global ops, the barriers, the
checkpoint points the strategy chose, the execution groups, and which
Airflow task id and map index runs each piece — so "which task do I clear
for partition 7?" has a written answer.

It is written by the ``validate`` task when a job is planned and rewritten
on a resume (the groups may differ).  Resume never reads it: resume trusts
only the effective config, the partitioning info and checkpoint markers,
so this file can never make a resume refuse.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_provider_dj.engine.planning.execution_group import ExecutionGroup
    from airflow_provider_dj.engine.planning.plan import ExecutionPlan, PlannedOp, Segment

PLAN_DOC_VERSION = 2
VALIDATE_TASK_ID = "validate"
PREFLIGHT_TASK_ID = "gpu_preflight"
EXPORT_TASK_ID = "export"


def _segment_of(plan: ExecutionPlan, op_index: int) -> Segment:
    return next(s for s in plan.segments if op_index in s.op_indices or op_index == s.keys_for_global)


def _node(plan: ExecutionPlan, op: PlannedOp, pid: int, group: ExecutionGroup, map_index: int) -> dict[str, Any]:
    seg = _segment_of(plan, op.index)
    node = {
        "id": f"op{op.index}_p{pid}",
        "op_index": op.index,
        "op_name": op.name,
        "kind": op.kind,
        "partition_id": pid,
        "segment": seg.index,
        "checkpoint": op.index in plan.checkpoint_points,
        "airflow_task_id": seg.task_id(),
        "airflow_map_index": map_index,
        "group_id": group.group_id,
    }
    if op.is_global:
        # A global op runs in three places: the key phase at the end of its
        # segment, the whole-dataset step, and the keep mask applied at the
        # start of the next segment (where its output is checkpointed).
        nxt = next(s for s in plan.segments if s.applies_global == op.index)
        node["phases"] = [
            {"phase": "keys", "airflow_task_id": seg.task_id(), "airflow_map_index": map_index},
            {"phase": "global", "airflow_task_id": plan.global_task_id(op.index), "airflow_map_index": None},
            {"phase": "apply_mask", "airflow_task_id": nxt.task_id(), "airflow_map_index": map_index},
        ]
    return node


def plan_document(
    plan: ExecutionPlan, partitioning_info: dict[str, Any] | None = None, *, job_id: str | None = None
) -> dict[str, Any]:
    """The JSON document for ``plan`` (an engine.planning.plan.ExecutionPlan with its groups set)."""
    groups = plan.groups or []
    parts = {p["partition_id"]: p for p in (partitioning_info or {}).get("partitions", [])}
    nodes = [_node(plan, op, pid, g, mi) for mi, g in enumerate(groups) for pid in g.partition_ids for op in plan.ops]
    segments = []
    for s in plan.segments:
        segments.append(
            dict(asdict(s), op_indices=s.op_indices, airflow_task_id=s.task_id(), mapped_over="execution_groups")
        )
    barriers = [
        {
            "after_segment": s.index,
            "global_op_index": s.keys_for_global,
            "global_op_name": plan.ops[s.keys_for_global].name,
            "airflow_task_ids": [plan.barrier_task_id(s.index), plan.global_task_id(s.keys_for_global)],
            "waits_for": f"dedup keys of all partitions from {s.task_id()}",
        }
        for s in plan.segments
        if s.keys_for_global is not None
    ]
    tasks = [PREFLIGHT_TASK_ID, VALIDATE_TASK_ID]
    for s in plan.segments:
        tasks.append(s.task_id())
        if s.keys_for_global is not None:
            tasks += [plan.barrier_task_id(s.index), plan.global_task_id(s.keys_for_global)]
    tasks.append(EXPORT_TASK_ID)
    return {
        "version": PLAN_DOC_VERSION,
        "job_id": job_id,
        "created_at": time.time(),
        "text_key": plan.text_key,
        "ops": [asdict(o) for o in plan.ops],
        "segments": segments,
        "barriers": barriers,
        "checkpoint_strategy": plan.strategy,
        "checkpoint_points": plan.checkpoint_points,
        "checkpoint_points_by_name": [{"op_index": i, "op_name": plan.ops[i].name} for i in plan.checkpoint_points],
        "execution_groups": [
            dict(
                g.to_dict(),
                airflow_map_index=mi,
                input_rows=sum(parts[p]["num_rows"] for p in g.partition_ids if p in parts) if parts else None,
            )
            for mi, g in enumerate(groups)
        ],
        "airflow_task_ids": tasks,
        "partitions": [
            {k: p[k] for k in ("partition_id", "start_row", "end_row", "num_rows") if k in p} for p in parts.values()
        ],
        "nodes": nodes,
    }
