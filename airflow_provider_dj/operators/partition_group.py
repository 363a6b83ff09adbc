"""PartitionGroupOperator: one mapped task instance per execution group.

Each instance runs one segment of the pipeline for its partitions on Ray.
All durable state is in the job directory keyed by partition id — not in
XCom, which a UI clear deletes, and not by map_index — so every try, retry
or clear resumes from the partitions' latest valid checkpoints and runs
only what is missing.  The grid shows each instance by its partitions and
row range (``map_index_template``), so a failed partition is obvious and
can be cleared alone.

Stops and kills (docs/stop_and_kill.md): a stop request ends the task as
stopped (JobStoppedError: failed, no retry, summary ``stopped``).  Airflow's
kill paths — "mark failed" or "clear" while running (SIGTERM from the
supervisor), ``execution_timeout`` — call ``on_kill``, which cancels this
task's Ray tasks with force, so no orphaned worker keeps writing into the
job directory.

Ray Jobs mode (the ``ray`` connection names a dashboard; docs/deployment.md): the group runs as one
Ray Job whose driver lives on the cluster (engine/runner/group_job.py), submitted under a
deterministic id (hooks/ray_jobs.py).  The task then waits for it in the triggerer
(``deferrable``, by default ``[dj] ray_jobs_deferrable``, on: no worker slot is held while the
partitions run) or in the worker; ``execute_complete`` verifies the group's checkpoints and succeeds, or fails with the Ray
Job's log tail.  A retry or a UI clear finds the group's submission (on the cluster by its id, and
in the job directory's ``ray_jobs/`` record) and attaches to a running one, trusts a succeeded one
once its checkpoints are verified, and submits again after a failed or stopped one, resuming from
the checkpoints.  ``on_kill`` stops the Ray Job.  Airflow 3.3's ``ResumableJobMixin`` is not used:
it persists an id the external system chose, after submitting, in a store a clear may reset; here
the id is computed before submitting, so there is no window in which a submitted job has no
record, and the cluster and the job directory answer on any Airflow version.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from airflow.configuration import conf

from airflow_provider_dj.engine.execution.segment_result import SegmentResult
from airflow_provider_dj.engine.planning.execution_group import ExecutionGroup
from airflow_provider_dj.engine.runner.dispatch import RayDispatcher
from airflow_provider_dj.engine.runner.steps import run_group
from airflow_provider_dj.hooks.ray import RayHook
from airflow_provider_dj.operators.base import (
    DJBaseOperator,
    event_defaults,
    guard_fails_fast,
    run_id_of,
    try_number,
)
from airflow_provider_dj.operators.local_run import ray_cpus
from airflow_provider_dj.operators.ray_job_step import RayJobStep, RayJobStepMixin

if TYPE_CHECKING:
    from airflow.sdk import Context

MAP_INDEX_TEMPLATE = "{{ task.execution_group['label'] }}"


class PartitionGroupOperator(RayJobStepMixin, DJBaseOperator):
    """Run one segment of the pipeline for one execution group's partitions on Ray (module docstring).

    :param job_dir: the job directory (templated; the DAG pulls it from ``validate``).
    :param segment_index: the segment to run.
    :param execution_group: the group: its partition ids and label (supplied by ``expand``).
    :param ray_conn_id: the Ray connection (in Ray Jobs mode the group runs there as one Ray Job).
    :param local_run: set only by ``dj-airflow run``: its in-process Ray's CPUs and CPU-only concurrency
        (operators/local_run.py); None under a scheduler.
    :param cpus_per_partition: CPUs each partition's Ray task holds.
    :param deferrable: Ray Jobs mode: wait in the triggerer (True) or the worker (False); default:
        Airflow's ``[operators] default_deferrable``, as Airflow's own operators (the generated DAGs
        pass ``[dj] ray_jobs_deferrable`` or the recipe's ``partition.ray_jobs_deferrable``).
    :param poll_interval: Ray Jobs mode: seconds between looks at the Ray Job and the group's progress.
    """

    template_fields: Sequence[str] = ("job_dir",)
    ui_color = "#d9ecf9"
    lineage_step = "partitions"

    def __init__(
        self,
        *,
        job_dir: str,
        segment_index: int,
        execution_group: dict,
        ray_conn_id: str | None = RayHook.default_conn_name,
        local_run: dict | None = None,
        cpus_per_partition: float = 1,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        poll_interval: float = 5.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.job_dir = job_dir
        self.segment_index = segment_index
        self.execution_group = execution_group
        self.ray_conn_id = ray_conn_id
        self.local_run = local_run  # what `dj-airflow run` decided (operators/local_run.py)
        self.cpus_per_partition = cpus_per_partition
        self.deferrable = bool(deferrable)
        self.poll_interval = poll_interval  # Ray Jobs mode: seconds between looks at the Ray Job
        self._dispatcher: RayDispatcher | None = None
        self._ray_job: tuple[Any, str] | None = None  # Ray Jobs mode: (client, submission id)

    def execute(self, context: Context) -> list[dict]:
        jobs_mode = RayHook(ray_conn_id=self.ray_conn_id).resolve()["mode"] == "jobs"
        with self.stop_protocol(context, self.job_dir):
            return self._run_ray_job(context) if jobs_mode else self._run_group(context)

    def on_kill(self) -> None:
        """Cancel this task's Ray work (force: the workers die) and wait until it has ended; in Ray Jobs
        mode, stop the group's Ray Job (its driver records the stop)."""
        if self._stop_ray_job():
            return
        dispatcher = self._dispatcher
        if dispatcher is None or dispatcher.handle is None:
            self.log.info("on_kill: no Ray work was started")
            return
        n, left = dispatcher.cancel("Airflow killed the task (on_kill)")
        self.log.warning(
            "on_kill: cancelled %d Ray task(s)/actor(s) of partitions %s; %d still running",
            n,
            list(self._group.partition_ids),
            left,
        )

    @property
    def _group(self) -> ExecutionGroup:
        """The task's group: XCom hands it over as a plain dict, the engine takes the dataclass."""
        return ExecutionGroup.of(self.execution_group)

    def _connect(self):
        return RayHook(ray_conn_id=self.ray_conn_id, in_process_cpus=ray_cpus(self.local_run)).get_client()

    def _run_group(self, context: Context) -> list[dict]:
        dispatcher = self._dispatcher = RayDispatcher(self._connect, num_cpus=self.cpus_per_partition)
        with guard_fails_fast():
            results = run_group(
                self.job_dir,
                self.segment_index,
                self._group,
                dispatcher,
                try_number=try_number(context),
                event_defaults=event_defaults(context),
                run_id=run_id_of(context),
                say=lambda m: self.log.info("%s", m),
            )
        return [r.to_dict() for r in results]  # XCom's plain dicts

    # -- Ray Jobs mode (operators/ray_job_step.py) ------------------------------
    def _run_ray_job(self, context: Context) -> list[dict]:
        if not self._group.partition_ids:
            self.log.info("Segment %s: no partitions to run", self.segment_index)
            return []
        return self._submit_and_wait(context)

    def _ray_job_step(self, context: Context) -> RayJobStep:
        from airflow_provider_dj.engine.jobdir import ray_jobs
        from airflow_provider_dj.engine.runner.group_job import settle_stopped_group, verify_group
        from airflow_provider_dj.engine.storage.context import JobContext
        from airflow_provider_dj.hooks.ray_jobs import group_spec

        job_dir, group, seg = self.job_dir, self._group, self.segment_index
        job_id = JobContext(job_dir).job_id

        def succeeded(entry: dict, sid: str, message: str) -> list[dict]:
            results = entry.get("results") or []  # the driver's record: already plain dicts
            for r in results:
                self.log.info("%s", SegmentResult.from_dict(r).line())
            self.log.info("%s", f"Ray job {sid}: {message}")
            return results

        return RayJobStep(
            label=f"Segment {seg}, execution group {group.group_id} ({group.label})",
            again="run the group again",
            submit=lambda client, spec_for: client.submit_or_attach(
                spec_for, job_dir=job_dir, job_id=job_id, segment_index=seg, group=group
            ),
            spec=lambda client, sid, attempt: group_spec(
                job_dir=job_dir,
                job_id=job_id,
                segment_index=seg,
                group=group,
                submission_id=sid,
                attempt=attempt,
                num_cpus=self.cpus_per_partition,
                namespace=client.namespace,
                **self._spec_context(context),
            ),
            poll=lambda client, sid: client.poll(sid, job_dir, seg, list(group.partition_ids)),
            trigger={"segment_index": seg, "partition_ids": list(group.partition_ids)},
            record_entry=lambda sid: ray_jobs.find_submission(ray_jobs.read_record(job_dir, seg, group.group_id), sid),
            verify=lambda: verify_group(job_dir, seg, list(group.partition_ids)),
            succeeded=succeeded,
            settle_stopped=lambda sid, request, defaults: settle_stopped_group(
                job_dir, job_id, seg, group, sid, request, event_defaults=defaults
            ),
        )
