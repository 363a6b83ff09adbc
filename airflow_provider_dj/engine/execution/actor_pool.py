"""Actor pools: one set of Ray actors per execution group, so a model starts once per actor.

Why: a plain Ray task per partition builds its ops afresh, so an op with a
costly start-up (a model to load) pays it for every partition.  An execution
group (docs/gpu_planning.md) is the run of partitions that should share one
start-up.  When a segment holds a ``stateful`` op (``ops.base.Op.stateful``),
``ray_dispatch.run_partitions`` starts a small pool of Ray actors for the
group — one PartitionGroupOperator execution — sends each partition to a
free actor, and kills the actors when the group ends (or is killed).  Each
actor keeps its stateful op instances, keyed by op index and fingerprint,
across every partition it runs; other ops are still created per partition,
as in a plain task, so no op that keeps per-partition state is shared by
accident.  Checkpoints stay per logical partition: an actor runs the very
same ``segment_runner.run_segment`` a plain task runs.

Pure-CPU segments without stateful ops keep plain tasks: an actor costs a
dedicated worker process and its resources for the group's whole life.

What an actor holds (``resolve_pool``): one replica of every op of the
segment, used one partition at a time, so its GPU share is the sum of the
segment's per-op shares (memory is held together) and its CPUs the largest
per-op figure (the ops run one after another).  Per-op figures come from the
validate task's actor plan (``stage_resources``: the probe report's
``num_gpus``/``num_cpus``), else from the op's explicit recipe arguments.
The actor count is the group's in-flight limit (``max_in_flight``, itself
derived from the planned actors), bounded by the planned actors of the
segment's ops and by the group's partitions.

Evidence: every actor writes ``actor_start`` and every kept op instance
``op_init`` (with its set-up duration), so tests and the monitor can count
model start-ups per group.
"""

from __future__ import annotations

import importlib
import logging
import math
import os
import socket
import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Iterable

from airflow_provider_dj.core.errors import DJError
from airflow_provider_dj.engine.execution.segment_result import SegmentOutcome, SegmentStopped

if TYPE_CHECKING:
    from airflow_provider_dj.engine.planning.plan import ExecutionPlan, PlannedOp, Segment
    from airflow_provider_dj.ops.base import Op

log = logging.getLogger(__name__)

_PACKAGE = "airflow_provider_dj."


class PoolResourceError(DJError, RuntimeError):
    """The pool's actors ask for resources the Ray cluster does not have at all (they would wait forever)."""


@dataclass(frozen=True)
class PoolSpec:
    actors: int
    num_cpus: float
    num_gpus: float
    stateful_ops: list[int] = field(default_factory=list)
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _op_class(name: str) -> type[Op]:
    from airflow_provider_dj.ops.registry import get_op_class

    return get_op_class(name)


def segment_op_indices(segment: Segment) -> list[int]:
    """Every op a partition of this segment may instantiate (mask, per-partition ops, key phase)."""
    extra = [i for i in (segment.applies_global, segment.keys_for_global) if i is not None]
    return sorted(set(segment.op_indices) | set(extra))


def stateful_op_indices(plan: ExecutionPlan, segment: Segment) -> list[int]:
    return [i for i in segment_op_indices(segment) if _op_class(plan.ops[i].name).stateful]


def op_modules(plan: ExecutionPlan) -> list[str]:
    """Modules outside this package that define the plan's ops (a plugin's or a test's).

    A Ray worker imports them before it builds ops, so their ``@register``
    runs there too; the provider's own ops are found by the registry itself.
    """
    mods = {_op_class(o.name).__module__ for o in plan.ops}
    return sorted(m for m in mods if not m.startswith(_PACKAGE) and m != "__main__")


def import_op_modules(modules: Iterable[str]) -> None:
    for mod in modules or ():
        importlib.import_module(mod)


def stage_resources(job_dir: str, actor_plan: Any) -> dict[str, Any] | None:
    """Per planned op (key: op index as a string): planned actors and one replica's Ray resources.

    Written into every execution group by the validate task, so the
    partition task sizes its pool from the real probe report.
    """
    if actor_plan is None:
        return None
    from airflow_provider_dj.engine.gpu.profiles import load_report, stages_from_report

    report = load_report(job_dir)
    if not report:
        return None
    stages = {s.op_index: s for s in stages_from_report(report)}
    return {
        str(i): {"actors": int(n), "num_gpus": float(stages[i].num_gpus), "num_cpus": float(stages[i].num_cpus)}
        for i, n in sorted(actor_plan.actors.items())
        if i in stages
    }


def _op_resources(spec: PlannedOp, resources: dict[str, Any] | None) -> dict[str, Any]:
    planned: dict[str, Any] | None = (resources or {}).get(str(spec.index))
    if planned:
        return planned
    cls = _op_class(spec.name)
    gpus = spec.args.get("num_gpus")
    if gpus is None and cls.uses_cuda:
        gpus = cls.gpu_num_gpus
    return {"num_gpus": float(gpus or 0.0), "num_cpus": spec.args.get("num_cpus")}


def resolve_pool(
    plan: ExecutionPlan,
    segment: Segment,
    n_partitions: int,
    *,
    max_in_flight: int | None = None,
    cpus_per_partition: float = 1.0,
    actor_resources: dict[str, Any] | None = None,
    cluster: dict[str, float] | None = None,
) -> PoolSpec | None:
    """The pool for one group of ``n_partitions`` partitions of ``segment``; None = plain tasks.

    ``cluster`` (``ray.cluster_resources()``) bounds the actors by what the cluster can place at once:
    the pool hands a partition to each free actor, and an actor Ray can never place would hold its
    partition forever."""
    stateful = stateful_op_indices(plan, segment)
    if not stateful or n_partitions < 1:
        return None
    ops = [plan.ops[i] for i in segment_op_indices(segment)]
    per_op = {o.index: _op_resources(o, actor_resources) for o in ops}
    shares = sum(float(r.get("num_gpus") or 0.0) for r in per_op.values())
    num_gpus = float(math.ceil(shares - 1e-9)) if shares > 1 + 1e-9 else shares  # Ray splits only one device
    cpus = [float(r["num_cpus"]) for r in per_op.values() if r.get("num_cpus") is not None]
    num_cpus = max([float(cpus_per_partition), *cpus])
    bounds = {"partitions in the group": n_partitions}
    if max_in_flight:
        bounds["max_in_flight"] = int(max_in_flight)
    planned = [int(r["actors"]) for r in per_op.values() if r.get("actors")]
    if planned:
        bounds["planned actors"] = min(planned)
    placeable = _placeable_actors(cluster, num_cpus, num_gpus)
    if placeable is not None:
        bounds["what the cluster can place"] = placeable
    which = min(bounds, key=lambda k: bounds[k])
    actors = max(1, bounds[which])
    names = ", ".join(f"{plan.ops[i].name}#{i}" for i in stateful)
    reason = (
        f"stateful op(s) {names}: {actors} actor(s), bound by {which} "
        f"({', '.join(f'{k} {v}' for k, v in bounds.items())})"
    )
    return PoolSpec(actors, num_cpus, num_gpus, stateful, reason)


def _placeable_actors(cluster: dict[str, float] | None, num_cpus: float, num_gpus: float) -> int | None:
    """How many actors of these resources the cluster's totals hold at once; None when unknown."""
    if not cluster:
        return None
    fits = [
        int(float(cluster.get(key, 0.0)) / need + 1e-9)
        for key, need in (("CPU", num_cpus), ("GPU", num_gpus))
        if need > 0
    ]
    return min(fits) if fits else None


def cluster_totals(ray: Any) -> dict[str, float] | None:
    """The cluster's total resources (``ray.cluster_resources()``); None when this client cannot say."""
    try:
        return dict(ray.cluster_resources())
    except Exception:  # noqa: BLE001 - a client without the call: let Ray schedule
        return None


def check_cluster_fits(ray: Any, spec: PoolSpec, segment_index: int) -> None:
    """Refuse, before any actor starts, a pool no node of this cluster can ever place."""
    total = cluster_totals(ray)
    if total is None:
        return
    for key, need in (("GPU", spec.num_gpus), ("CPU", spec.num_cpus)):
        have = float(total.get(key, 0.0))
        if need > 0 and need > have + 1e-9:
            raise PoolResourceError(
                f"segment {segment_index}: each actor of the pool needs {key}={need:g} but the Ray cluster has "
                f"{have:g}; run on a cluster with {key}s, or lower the op's num_gpus/num_cpus in the recipe "
                f"(or re-run the GPU preflight so the plan matches this cluster)"
            )


class SegmentActor:
    """Runs partitions of one segment in one long-lived process, keeping stateful ops alive."""

    def __init__(
        self, job_dir: str, segment_index: int, actor_index: int, event_defaults: dict[str, Any], modules: list[str]
    ) -> None:
        t0 = time.perf_counter()
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        import_op_modules(modules)
        from airflow_provider_dj.engine.jobdir.events import EventLog
        from airflow_provider_dj.engine.storage.context import JobContext

        self.job_dir = job_dir
        self.segment_index = segment_index
        self.actor_index = actor_index
        self._ops: dict[tuple[int, str], Any] = {}
        self._partition: int | None = None
        # Its own writer: on object storage a writer rewrites its whole file,
        # so it must not share one with run_segment's log in this process.
        host = socket.gethostname().replace("_", "-")
        self._events = EventLog(
            job_dir,
            JobContext(job_dir).job_id,
            writer=f"{host}-{os.getpid()}-actor",
            defaults=dict(event_defaults or {}),
        )
        self._events.emit(
            "actor_start",
            segment=segment_index,
            actor_index=actor_index,
            pid=os.getpid(),
            duration=round(time.perf_counter() - t0, 6),
            status="running",
        )

    def run(self, partition_id: int, try_number: int | None, event_defaults: dict[str, Any]) -> SegmentOutcome:
        from airflow_provider_dj.engine.execution.segment_runner import run_segment
        from airflow_provider_dj.engine.jobdir.stop_control import StopRequested

        self._partition = partition_id
        self._events.defaults = dict(event_defaults or {}, try_number=try_number)
        try:
            return run_segment(
                self.job_dir,
                self.segment_index,
                partition_id,
                try_number=try_number,
                event_defaults=event_defaults,
                op_factory=self.op,
            )
        except StopRequested as exc:  # an outcome, not an error (as in ray_dispatch.segment_task)
            return SegmentStopped(partition_id, self.segment_index, exc.request)

    def op(self, spec: PlannedOp, text_key: str) -> Op:
        """run_segment's op factory: stateful ops once per actor, the rest per partition."""
        from airflow_provider_dj.ops.registry import create_op

        if not _op_class(spec.name).stateful:
            return create_op(spec.name, spec.args, text_key)
        key = (spec.index, spec.fingerprint)
        op = self._ops.get(key)
        if op is None:
            t0 = time.perf_counter()
            op = create_op(spec.name, spec.args, text_key)
            op.setup()
            self._ops[key] = op
            took = round(time.perf_counter() - t0, 6)
            self._events.emit(
                "op_init",
                partition_id=self._partition,
                segment=self.segment_index,
                op_index=spec.index,
                op_name=spec.name,
                duration=took,
                actor_index=self.actor_index,
                pid=os.getpid(),
                status="success",
            )
            log.info(
                "actor %d: %s (op %d) set up in %.2fs; kept for the group's next partitions",
                self.actor_index,
                spec.name,
                spec.index,
                took,
            )
        return op


class GroupActorPool:
    """The driver's side: starts the actors, hands partitions to free ones, kills them at the end."""

    def __init__(
        self,
        ray: Any,
        spec: PoolSpec,
        job_dir: str,
        segment_index: int,
        event_defaults: dict[str, Any],
        modules: list[str],
        handle: Any = None,
    ) -> None:
        self.ray = ray
        self.spec = spec
        self.job_dir = job_dir
        self.segment_index = segment_index
        self.event_defaults = dict(event_defaults or {})
        self.modules = list(modules)
        self.handle = handle
        self._cls = ray.remote(num_cpus=spec.num_cpus, num_gpus=spec.num_gpus, max_restarts=0, max_task_retries=0)(
            SegmentActor
        )
        self.actors: list[Any] = []  # every actor started (for the kill at the end)
        self.free: list[Any] = []
        self.busy: dict[str, Any] = {}  # ref -> actor
        self.replaced = 0
        for _ in range(spec.actors):
            self.free.append(self._start())

    def _start(self) -> Any:  # a Ray actor handle
        actor = self._cls.remote(self.job_dir, self.segment_index, len(self.actors), self.event_defaults, self.modules)
        self.actors.append(actor)
        if self.handle is not None:
            self.handle.track_actors(self.ray, self.actors)
        return actor

    def submit(self, partition_id: int, try_number: int | None, event_defaults: dict[str, Any]) -> Any:  # an ObjectRef
        if not self.free:  # an actor died earlier: its replacement starts only when work needs it
            self.free.append(self._start())
            self.replaced += 1
        actor = self.free.pop(0)
        ref = actor.run.remote(partition_id, try_number, dict(event_defaults or {}))
        self.busy[ref] = actor
        return ref

    def release(self, ref: Any, error: BaseException | None = None) -> None:
        """The partition behind ``ref`` ended; its actor is free again unless it died."""
        actor = self.busy.pop(ref, None)
        if actor is None:
            return
        if error is not None and _actor_died(self.ray, error):
            log.warning(
                "segment %d: an actor of the pool died (%s); a new one starts for the next partition",
                self.segment_index,
                type(error).__name__,
            )
            self._kill(actor)
            return
        self.free.append(actor)

    def discard(self, ref: Any) -> None:
        """The partition behind ``ref`` is given up (the watchdog found it stalled): its actor is killed,
        and a new one starts when work needs it."""
        actor = self.busy.pop(ref, None)
        if actor is not None:
            self._kill(actor)

    def _kill(self, actor: Any) -> None:
        try:
            self.ray.kill(actor, no_restart=True)
        except Exception as exc:  # noqa: BLE001 - already dead
            log.debug("kill of actor: %s", exc)

    def shutdown(self) -> None:
        """Kill every actor of the pool: the group's models and GPU shares are released now."""
        for actor in self.actors:
            self._kill(actor)
        self.free.clear()


def _actor_died(ray: Any, error: BaseException) -> bool:
    died = getattr(getattr(ray, "exceptions", None), "RayActorError", None)
    return died is not None and isinstance(error, died)
