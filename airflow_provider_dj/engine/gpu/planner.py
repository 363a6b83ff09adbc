"""Actor planning: how many replicas of each GPU op the cluster can run at once.

Why a planner at all: a GPU op's throughput scales with its replicas, but
each replica holds a model in device memory, a Ray GPU share, CPUs and one
slot of the per-device actor cap.  Too few replicas waste paid GPUs; one too
many is an out-of-memory crash hours into a run.  The preflight measured
each op on a sample; this module turns those figures into counts, before
any partition starts, with pure functions over plain dataclasses (no Ray,
no probe internals) so every decision can be tested on synthetic clusters.

The algorithm (documented with numbers in docs/gpu_planning.md):

1. every GPU stage starts at one actor; if that does not fit, raise
   ``PlanningError`` naming the op and the resource (never over-commit,
   never "fix" it by adding partitions);
2. repeatedly find the bottleneck: the stage with the lowest aggregate
   throughput, in rows of the *job's input* per second (a stage behind a
   filter that keeps 50% needs half the speed);
3. add one actor to it if CPUs, Ray GPU shares, every device's memory
   share, the per-device actor cap and the stage's available batches all
   still allow; actors are packed onto devices by first-fit decreasing on
   their memory share, re-packed from scratch at every step;
4. stop at the first bottleneck that cannot grow: adding to any other
   stage would not raise the pipeline's throughput.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, Mapping

from airflow_provider_dj.core.errors import DJError

_EPS = 1e-9


class PlanningError(DJError, ValueError):
    """The measured pipeline cannot run on this cluster as configured.

    ``op_name`` (None when the problem is the combination of ops) and
    ``resource`` (``cpus``, ``gpus``, ``gpu_memory``, ``gpu_shares``,
    ``actor_cap``) say what to change; the message says how.
    """

    def __init__(self, message: str, *, op_name: str | None = None, resource: str | None = None) -> None:
        super().__init__(message)
        self.op_name = op_name
        self.resource = resource

    def __reduce__(self):  # crosses process boundaries (Airflow task runner, Ray)
        return (_rebuild_planning_error, (str(self), self.op_name, self.resource))


def _rebuild_planning_error(message: str, op_name: str | None, resource: str | None) -> PlanningError:
    return PlanningError(message, op_name=op_name, resource=resource)


@dataclass(frozen=True)
class StageProfile:
    """One measured op, as the planner sees it.

    ``rows_per_s`` is one actor's steady input throughput; ``input_share``
    the fraction of the job's input rows that reach this op (product of the
    output ratios upstream), so throughputs of stages behind filters compare
    fairly.  ``memory_fraction`` is one actor's share of one device's memory
    including headroom; None when it was not measured (CPU probe path).
    """

    op_index: int
    op_name: str
    rows_per_s: float
    num_gpus: float = 0.0
    num_cpus: float = 1.0
    memory_fraction: float | None = None
    model_init_s: float = 0.0
    batch_size: int = 1
    output_ratio: float = 1.0
    input_share: float = 1.0

    def __post_init__(self) -> None:
        where = f"op {self.op_name!r} (process[{self.op_index}])"
        if not (self.rows_per_s > 0 and math.isfinite(self.rows_per_s)):
            raise ValueError(
                f"{where}: measured rows_per_s must be a positive number, got {self.rows_per_s!r}; "
                f"re-run the GPU preflight (its probe produced no throughput)"
            )
        if self.num_gpus < 0 or self.num_cpus < 0:
            raise ValueError(f"{where}: num_gpus/num_cpus must be >= 0, got {self.num_gpus}/{self.num_cpus}")
        if self.num_gpus <= 0 and self.num_cpus <= 0:
            raise ValueError(
                f"{where}: an actor must hold some resource (num_cpus or num_gpus > 0), "
                f"otherwise nothing bounds how many run"
            )
        if self.num_gpus > 1 and self.num_gpus != int(self.num_gpus):
            raise ValueError(
                f"{where}: num_gpus={self.num_gpus} above 1 must be a whole number (Ray only "
                f"shares a single device fractionally)"
            )
        if self.batch_size < 1:
            raise ValueError(f"{where}: batch_size must be >= 1, got {self.batch_size}")

    @property
    def uses_gpu(self) -> bool:
        return self.num_gpus > 0


@dataclass(frozen=True)
class ClusterResources:
    """What the planner may hand out.  ``reserved_cpus`` stay free for CPU ops and the driver."""

    cpus: float
    gpus: int = 0
    device_memory_bytes: int | None = None
    max_gpu_workers_per_device: int = 5
    reserved_cpus: float = 0.0

    def __post_init__(self) -> None:
        if self.cpus <= 0 or self.gpus < 0 or self.max_gpu_workers_per_device < 1:
            raise ValueError(
                f"cluster needs cpus > 0, gpus >= 0 and max_gpu_workers_per_device >= 1, got "
                f"cpus={self.cpus}, gpus={self.gpus}, cap={self.max_gpu_workers_per_device}"
            )

    @property
    def usable_cpus(self) -> float:
        return self.cpus - self.reserved_cpus


@dataclass
class ActorPlan:
    """The planner's answer.  Throughputs are in job-input rows per second."""

    actors: dict[int, int]  # op_index -> actors
    placement: list[list[int]]  # per device: op_index of each actor packed on it
    stage_rows_per_s: dict[int, float]
    pipeline_rows_per_s: float
    bottleneck: int  # op_index of the slowest stage
    stop_reason: str  # why the bottleneck could not grow
    cpus_used: float
    gpu_shares_used: float
    names: dict[int, str] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {
            "actors": {self.names.get(i, str(i)) + f"#{i}": n for i, n in sorted(self.actors.items())},
            "actors_by_op_index": {str(i): n for i, n in sorted(self.actors.items())},
            "placement": self.placement,
            "stage_rows_per_s": {str(i): round(v, 3) for i, v in sorted(self.stage_rows_per_s.items())},
            "pipeline_rows_per_s": round(self.pipeline_rows_per_s, 3),
            "bottleneck_op_index": self.bottleneck,
            "stop_reason": self.stop_reason,
            "cpus_used": self.cpus_used,
            "gpu_shares_used": round(self.gpu_shares_used, 6),
        }


def available_batches(stages: Iterable[StageProfile], rows: int) -> dict[int, int]:
    """Batches each stage will see when ``rows`` job-input rows flow through: more actors than that idle."""
    return {s.op_index: max(1, math.ceil(rows * s.input_share / s.batch_size)) for s in stages}


def _stage_rate(stage: StageProfile, actors: int) -> float:
    if stage.input_share <= 0:
        return math.inf  # nothing reaches it: never the bottleneck
    return actors * stage.rows_per_s / stage.input_share


def _pack(
    stages: Mapping[int, StageProfile],
    counts: Mapping[int, int],
    cluster: ClusterResources,
    *,
    check_memory: bool = True,
    check_cap: bool = True,
) -> list[list[int]] | None:
    """First-fit decreasing of all GPU actors onto devices; None when they do not fit.

    A device holds actors while their Ray GPU shares sum to <= 1, their
    measured memory shares sum to <= 1 and there are at most
    ``max_gpu_workers_per_device`` of them.  Whole-device actors
    (num_gpus >= 1) take ceil(num_gpus) empty devices.
    """
    n = cluster.gpus
    mem = [0.0] * n
    share = [0.0] * n
    slots: list[list[int]] = [[] for _ in range(n)]
    items = [(stages[i], c) for i, c in counts.items() if stages[i].uses_gpu]
    # Largest first: whole devices, then by memory share, then by Ray share.
    items.sort(
        key=lambda it: (
            -it[0].num_gpus if it[0].num_gpus >= 1 else 0,
            -(it[0].memory_fraction or 0.0),
            -it[0].num_gpus,
            it[0].op_index,
        )
    )
    cap = cluster.max_gpu_workers_per_device if check_cap else math.inf
    for stage, count in items:
        m = (stage.memory_fraction or 0.0) if check_memory else 0.0
        for _ in range(count):
            if stage.num_gpus >= 1:
                need = int(stage.num_gpus)
                empty = [d for d in range(n) if not slots[d]]
                if len(empty) < need or (check_memory and m > need + _EPS):
                    return None
                for d in empty[:need]:
                    mem[d], share[d] = 1.0, 1.0
                    slots[d].append(stage.op_index)
                continue
            for d in range(n):
                if share[d] + stage.num_gpus <= 1 + _EPS and mem[d] + m <= 1 + _EPS and len(slots[d]) < cap:
                    share[d] += stage.num_gpus
                    mem[d] += m
                    slots[d].append(stage.op_index)
                    break
            else:
                return None
    return slots


def _gpu_blocker(stages: Mapping[int, StageProfile], counts: Mapping[int, int], cluster: ClusterResources) -> str:
    """Which GPU limit a failed packing hit: the first one whose relaxation makes it fit."""
    if _pack(stages, counts, cluster, check_memory=False) is not None:
        return "gpu_memory"
    if _pack(stages, counts, cluster, check_cap=False) is not None:
        return "actor_cap"
    return "gpu_shares"


_GPU_REASON = {
    "gpu_memory": "no device has room for another actor's measured memory share",
    "actor_cap": "every device is at max_gpu_workers_per_device",
    "gpu_shares": "the Ray GPU shares of all devices are used",
}


def _cpus_used(stages: Mapping[int, StageProfile], counts: Mapping[int, int]) -> float:
    return sum(stages[i].num_cpus * c for i, c in counts.items())


def _check_one_each(stages: Mapping[int, StageProfile], cluster: ClusterResources) -> list[list[int]]:
    """The floor: one actor per stage.  Raises PlanningError naming the op and resource that block it."""
    usable = cluster.usable_cpus
    for s in stages.values():
        where = f"op {s.op_name!r} (process[{s.op_index}])"
        if s.num_cpus > usable + _EPS:
            raise PlanningError(
                f"{where} needs num_cpus={s.num_cpus:g} per actor but the cluster has {usable:g} "
                f"CPUs to give; lower the op's num_cpus or add CPUs",
                op_name=s.op_name,
                resource="cpus",
            )
        if not s.uses_gpu:
            continue
        if cluster.gpus == 0:
            raise PlanningError(
                f"{where} needs num_gpus={s.num_gpus:g} per actor but the cluster has no GPU; run "
                f"on a GPU cluster, or set partition.gpu_preflight_enabled: false with explicit "
                f"resources for a CPU run",
                op_name=s.op_name,
                resource="gpus",
            )
        if s.num_gpus > cluster.gpus:
            raise PlanningError(
                f"{where} needs num_gpus={s.num_gpus:g} per actor but the cluster has "
                f"{cluster.gpus} GPU(s); lower num_gpus or add GPUs",
                op_name=s.op_name,
                resource="gpus",
            )
        if s.memory_fraction is not None and s.memory_fraction > max(1.0, s.num_gpus) + _EPS:
            size = f" of {cluster.device_memory_bytes / 2**30:.1f} GiB" if cluster.device_memory_bytes else ""
            raise PlanningError(
                f"{where} measured {s.memory_fraction:.0%} of one device's memory{size} (peak plus "
                f"10% headroom): one actor does not fit; lower its batch_size or use larger GPUs",
                op_name=s.op_name,
                resource="gpu_memory",
            )
    ones = {i: 1 for i in stages}
    cpus = _cpus_used(stages, ones)
    if cpus > usable + _EPS:
        parts = ", ".join(f"{s.op_name} {s.num_cpus:g}" for s in stages.values())
        raise PlanningError(
            f"one actor per GPU stage needs {cpus:g} CPUs ({parts}) but the cluster has {usable:g} "
            f"to give; lower num_cpus or add CPUs",
            resource="cpus",
        )
    placed = _pack(stages, ones, cluster)
    if placed is None:
        blocker = _gpu_blocker(stages, ones, cluster)
        gpu_ops = [s for s in stages.values() if s.uses_gpu]
        detail = ", ".join(
            f"{s.op_name}: num_gpus {s.num_gpus:g}, memory "
            f"{'unmeasured' if s.memory_fraction is None else f'{s.memory_fraction:.0%}'}"
            for s in gpu_ops
        )
        only = gpu_ops[0].op_name if len(gpu_ops) == 1 else None
        raise PlanningError(
            f"one actor per GPU stage does not fit on {cluster.gpus} GPU(s): "
            f"{_GPU_REASON[blocker]} ({detail}; cap {cluster.max_gpu_workers_per_device} actors per "
            f"device); lower batch_size or num_gpus, raise max_gpu_workers_per_device, or add GPUs",
            op_name=only,
            resource=blocker,
        )
    return placed


def plan_actors(
    stages: Iterable[StageProfile], cluster: ClusterResources, batches: Mapping[int, int] | None = None
) -> ActorPlan:
    """Actors per stage (see the module docstring).  ``batches``: op_index -> batches available (None = no cap)."""
    by_index = {s.op_index: s for s in stages}
    if not by_index:
        raise ValueError("plan_actors needs at least one stage")
    placement = _check_one_each(by_index, cluster)
    counts = {i: 1 for i in by_index}
    stop = ""
    while True:
        rates = {i: _stage_rate(by_index[i], c) for i, c in counts.items()}
        b = min(rates, key=lambda i: (rates[i], i))
        stage = by_index[b]
        trial = dict(counts)
        trial[b] += 1
        limit = (batches or {}).get(b)
        if limit is not None and trial[b] > limit:
            stop = f"{stage.op_name}: all {limit} available batches already have an actor"
            break
        if _cpus_used(by_index, trial) > cluster.usable_cpus + _EPS:
            stop = f"{stage.op_name}: CPUs exhausted ({_cpus_used(by_index, counts):g}/{cluster.usable_cpus:g} used)"
            break
        if stage.uses_gpu:
            packed = _pack(by_index, trial, cluster)
            if packed is None:
                stop = f"{stage.op_name}: {_GPU_REASON[_gpu_blocker(by_index, trial, cluster)]}"
                break
            placement = packed
        counts = trial
    rates = {i: _stage_rate(by_index[i], c) for i, c in counts.items()}
    b = min(rates, key=lambda i: (rates[i], i))
    return ActorPlan(
        actors=counts,
        placement=placement,
        stage_rows_per_s=rates,
        pipeline_rows_per_s=rates[b],
        bottleneck=b,
        stop_reason=stop,
        cpus_used=_cpus_used(by_index, counts),
        gpu_shares_used=sum(by_index[i].num_gpus * c for i, c in counts.items()),
        names={i: s.op_name for i, s in by_index.items()},
    )
