"""Execution plan: segments between global ops, checkpoint points, groups.

A recipe's op list is cut at every global op (deduplicator).  Each
*segment* is per-partition work that runs in one mapped Airflow task per
execution group:

    segment 0:  ops [0, g1)           then the per-partition key phase of g1
    segment 1:  apply g1's keep mask, ops (g1, g2), key phase of g2
    ...
    last:       apply the last global op's mask, remaining ops

Between segments sits a barrier and the global step that turns all
partitions' keys into keep masks.  The plan is pure data (no Airflow), so
the DAG factory and the engine derive the same structure from the recipe,
and it is written to ``dag_execution_plan.json`` for people and tools.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

import xxhash

from airflow_provider_dj.engine.planning.execution_group import ExecutionGroup
from airflow_provider_dj.ops.base import ENGINE_OP_ARGS
from airflow_provider_dj.ops.registry import get_op_class

if TYPE_CHECKING:
    from airflow_provider_dj.engine.config.schema import OpSpec, Recipe


@dataclass(frozen=True)
class PlannedOp:
    index: int
    name: str
    args: dict[str, Any]
    kind: str
    is_global: bool
    fingerprint: str  # of ops 0..index: a checkpoint is reusable only under the same prefix pipeline


@dataclass(frozen=True)
class Segment:
    index: int
    start: int  # first per-partition op index run here
    end: int  # exclusive; == index of the global op that follows, or len(ops)
    applies_global: int | None  # global op whose keep mask is applied first
    keys_for_global: int | None  # global op whose keys are computed last

    @property
    def op_indices(self) -> list[int]:
        return list(range(self.start, self.end))

    def task_id(self) -> str:
        return f"partitions_seg{self.index}"


@dataclass
class ExecutionPlan:
    ops: list[PlannedOp]
    segments: list[Segment]
    checkpoint_points: list[int]  # "state after op i" is saved for these i
    strategy: str
    text_key: str
    groups: list[ExecutionGroup] = field(default_factory=list)

    @property
    def final_op_index(self) -> int:
        return len(self.ops) - 1

    def global_task_id(self, op_index: int) -> str:
        return f"global_op{op_index}_{self.ops[op_index].name}"

    def barrier_task_id(self, segment_index: int) -> str:
        return f"barrier_seg{segment_index}"


def _fingerprints(process: Sequence[OpSpec], text_key: str) -> list[str]:
    h = xxhash.xxh3_128()
    h.update(json.dumps({"text_key": text_key}, sort_keys=True).encode())
    out = []
    for spec in process:
        # Engine-only arguments (the failure-rate guard's limit) do not change what an op outputs.
        args = {k: v for k, v in spec.args.items() if k not in ENGINE_OP_ARGS}
        h.update(json.dumps({"name": spec.name, "args": args}, sort_keys=True, default=str).encode())
        out.append(h.copy().hexdigest())
    return out


def checkpoint_points(strategy: str, n_ops: int, op_names: tuple[str, ...], ops: list[PlannedOp]) -> list[int]:
    """Op indices whose output the strategy checkpoints, plus the ones the DAG needs.

    Needed regardless of strategy: the state just before each global op
    (the next segment starts from it, in another task) and the final state
    (the export task reads it).  'disabled' means nothing beyond those.
    """
    n = len(ops)
    chosen: set[int] = set()
    if strategy == "every_op":
        chosen = set(range(n))
    elif strategy == "every_n_ops":
        chosen = {i for i in range(n) if (i + 1) % max(1, n_ops) == 0}
    elif strategy == "manual":
        chosen = {op.index for op in ops if op.name in set(op_names)}
    for op in ops:
        if op.is_global and op.index > 0:
            chosen.add(op.index - 1)
    if n:
        chosen.add(n - 1)
    # A global op's own output exists only after its mask is applied in the
    # next segment, which is where it is saved when chosen.
    return sorted(chosen)


def build_plan(recipe: Recipe) -> ExecutionPlan:
    """Plan from a Recipe (engine.config.recipe.Recipe); no data is read."""
    fps = _fingerprints(recipe.process, recipe.text_key)
    ops = []
    for spec, fp in zip(recipe.process, fps):
        cls = get_op_class(spec.name)
        ops.append(PlannedOp(spec.index, spec.name, dict(spec.args), cls.kind, bool(cls.is_global), fp))
    segments: list[Segment] = []
    start = 0
    applies: int | None = None
    for op in ops:
        if op.is_global:
            segments.append(Segment(len(segments), start, op.index, applies, op.index))
            applies = op.index
            start = op.index + 1
    segments.append(Segment(len(segments), start, len(ops), applies, None))
    cp = recipe.checkpoint
    strategy = cp.strategy if cp.enabled else "disabled"
    points = checkpoint_points(strategy, cp.n_ops, tuple(cp.op_names), ops)
    return ExecutionPlan(
        ops=ops, segments=segments, checkpoint_points=points, strategy=strategy, text_key=recipe.text_key
    )


def execution_groups(
    partitioning_info: dict[str, Any],
    group_size: int = 1,
    completed: dict[int, Any] | None = None,
    *,
    max_groups: int | None = None,
    whole: frozenset[int] = frozenset(),
) -> list[ExecutionGroup]:
    """Consecutive partitions grouped for one mapped task each (one per group by default).

    ``completed`` (on resume: partition id -> {"last_op", "final"}): when
    unfinished partitions resume from different checkpoints, every group
    holds one partition (why: ``engine.planning.groups.uniform_positions``).
    ``max_groups``: never more groups than this (``engine.planning.groups.group_cap``);
    past it the partitions fill exactly ``max_groups`` groups of balanced sizes.
    ``whole``: partitions expected to need no work (an earlier job's checkpoints cover them): each
    run of consecutive ones is one group, so a night that reuses most partitions starts a task for
    each run of them, not for each partition.  A hint only: a partition of such a group computes
    whatever it cannot reuse, as any partition does.
    """
    from airflow_provider_dj.engine.planning.groups import uniform_positions

    if completed and not uniform_positions(completed):
        group_size = 1
    parts = partitioning_info["partitions"]
    groups = []
    i = 0
    for gi, size in enumerate(_group_spans(parts, group_size, max_groups, whole)):
        first, last = parts[i], parts[i + size - 1]
        ids = tuple(p["partition_id"] for p in parts[i : i + size])
        i += size
        pid_label = f"p{ids[0]}" if len(ids) == 1 else f"p{ids[0]}-p{ids[-1]}"
        groups.append(
            ExecutionGroup(
                group_id=gi,
                partition_ids=ids,
                start_row=first["start_row"],
                end_row=last["end_row"],
                label=f"{pid_label} rows {first['start_row']}-{last['end_row'] - 1}",
            )
        )
    return groups


def _group_spans(
    parts: list[dict[str, Any]], group_size: int, max_groups: int | None, whole: frozenset[int]
) -> list[int]:
    """The sizes of consecutive groups over ``parts``: each run of ``whole`` partitions one group, the
    other runs in groups of ``group_size``; ``group_sizes`` over all of them instead when that makes
    no more groups (no ``whole``, or runs too short to gain) or the runs would pass ``max_groups``."""
    from airflow_provider_dj.engine.planning.groups import group_sizes

    plain = group_sizes(len(parts), group_size, max_groups)
    if not whole or not parts:
        return plain
    runs: list[tuple[bool, int]] = []  # (whole?, length) of each run of consecutive partitions
    for p in parts:
        w = p["partition_id"] in whole
        if runs and runs[-1][0] == w:
            runs[-1] = (w, runs[-1][1] + 1)
        else:
            runs.append((w, 1))
    spans = [size for w, n in runs for size in ([n] if w else group_sizes(n, group_size))]
    if len(spans) >= len(plain) or (max_groups is not None and len(spans) > max_groups):
        return plain
    return spans


def plan_groups(
    partitioning_info: dict[str, Any],
    group_size: int = 1,
    completed: dict[int, Any] | None = None,
    *,
    max_mapped_tasks: int | None = None,
    explicit: bool = False,
) -> list[ExecutionGroup]:
    """``execution_groups`` under the cap for a segment mapped by Airflow.

    ``max_mapped_tasks``: Airflow's ``[core] max_map_length`` (``None``: nothing
    maps the groups, no cap); ``explicit``: ``group_size`` is the recipe's integer,
    so the readable cap ``[dj] max_groups_per_segment`` does not apply
    (``engine.planning.groups.group_cap``)."""
    from airflow_provider_dj import settings
    from airflow_provider_dj.engine.planning.groups import group_cap

    cap = group_cap(max_mapped_tasks, settings.get("max_groups_per_segment"), explicit=explicit)
    return execution_groups(partitioning_info, group_size, completed, max_groups=cap)
