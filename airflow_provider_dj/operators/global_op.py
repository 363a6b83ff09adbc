"""GlobalOpOperator: the whole-dataset step of a deduplicator.

Runs after the barrier, over the keys every partition committed, and
commits one keep mask per partition.  A small step (its keys within
``[dj] global_step_in_process_max_mb``) runs in the task process itself; a larger
one is sharded (engine/execution/global_shards.py) and its tasks run on the
Ray the ``ray`` connection names (embedded or a cluster), so this process
holds no key.  Its result is durable in the job directory: a retry or a
clear redoes only what did not commit.

Ray Jobs mode (the ``ray`` connection names a dashboard; docs/deployment.md): the step runs as one
Ray Job whose driver lives on the cluster (engine/runner/global_job.py), which runs the step there
and its key shards' tasks as its Ray tasks, so neither the keys nor the orchestration touch the
Airflow worker.  It is submitted under a deterministic id (``dj-<job>-<dir hash>-op<i>``, then
``-r<n>`` after a failed or stopped attempt; hooks/ray_jobs.py), and the task waits for it in the
triggerer (``deferrable``, by default ``[dj] ray_jobs_deferrable`` as the partition tasks do) or in
the worker.  It succeeds once every partition's keep mask is committed, else fails with the Ray
job's log tail.  A job already complete, or whose masks are all committed, submits nothing; a retry
or a restarted worker attaches to the running submission instead of starting another; ``on_kill``
stops the Ray Job.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from airflow.configuration import conf

from airflow_provider_dj.engine.input.task_map import ray_task_runner
from airflow_provider_dj.engine.job.completed_export import is_job_complete
from airflow_provider_dj.engine.runner.steps import run_global_step
from airflow_provider_dj.hooks.ray import RayHook
from airflow_provider_dj.operators.base import (
    DJBaseOperator,
    event_defaults,
)
from airflow_provider_dj.operators.local_run import ray_cpus
from airflow_provider_dj.operators.ray_job_step import RayJobStep, RayJobStepMixin

if TYPE_CHECKING:
    from airflow.sdk import Context


class GlobalOpOperator(RayJobStepMixin, DJBaseOperator):
    """Decide a deduplicator's keep masks over every partition's keys (module docstring).

    :param job_dir: the job directory (templated).
    :param op_index: the global op's index in the plan.
    :param ray_conn_id: the Ray connection its sharded tasks run on (or, in Ray Jobs mode, the step).
    :param local_run: set only by ``dj-airflow run``: its in-process Ray's CPUs and CPU-only concurrency
        (operators/local_run.py); None under a scheduler.
    :param deferrable: Ray Jobs mode: wait in the triggerer (True) or the worker (False); default:
        Airflow's ``[operators] default_deferrable``, as Airflow's own operators (the generated DAGs
        pass ``[dj] ray_jobs_deferrable`` or the recipe's ``partition.ray_jobs_deferrable``).
    :param poll_interval: Ray Jobs mode: seconds between looks at the Ray Job.
    """

    template_fields: Sequence[str] = ("job_dir",)
    ui_color = "#f6d9e8"
    lineage_step = "global"

    def __init__(
        self,
        *,
        job_dir: str,
        op_index: int,
        ray_conn_id: str | None = RayHook.default_conn_name,
        local_run: dict | None = None,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        poll_interval: float = 5.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.job_dir = job_dir
        self.op_index = op_index
        self.ray_conn_id = ray_conn_id
        self.local_run = local_run
        self.deferrable = bool(deferrable)
        self.poll_interval = poll_interval
        self._ray_job: tuple[Any, str] | None = None  # Ray Jobs mode: (client, submission id)

    def _ray_tasks(self, fn: Any, args_list: list[tuple]) -> list[Any]:
        """Run a sharded step's tasks on Ray, connecting only when the step is sharded."""
        RayHook(ray_conn_id=self.ray_conn_id, in_process_cpus=ray_cpus(self.local_run)).get_client()
        return ray_task_runner(fn, args_list)

    def execute(self, context: Context) -> dict:
        if is_job_complete(self.job_dir):
            self.log.info("job already completed: nothing to do")
            return {"op_index": self.op_index, "skipped": True}
        if RayHook(ray_conn_id=self.ray_conn_id).resolve()["mode"] == "jobs":
            with self.stop_protocol(context, self.job_dir):
                return self._run_ray_job(context)
        # A pending stop ends this task before the whole-dataset step (docs/stop_and_kill.md).
        with self.stop_protocol(context, self.job_dir):
            step = run_global_step(
                self.job_dir, self.op_index, event_defaults=event_defaults(context), run_tasks=self._ray_tasks
            )
        result = step.to_dict()  # XCom's plain dict
        self.log.info("global op %d: %s", self.op_index, result)
        return result

    def on_kill(self) -> None:
        """Ray Jobs mode: stop the step's Ray Job (its driver records the stop).  Otherwise the step's
        Ray tasks end with this process (their driver)."""
        self._stop_ray_job()

    # -- Ray Jobs mode (operators/ray_job_step.py) ------------------------------
    def _run_ray_job(self, context: Context) -> dict:
        from airflow_provider_dj.engine.runner.global_job import verify_global

        done, message = verify_global(self.job_dir, self.op_index)
        if done:  # nothing to run: no dashboard is asked
            self.log.info("global op %d: %s; nothing to submit", self.op_index, message)
            return {"op_index": self.op_index, "skipped": True}
        return self._submit_and_wait(context)

    def _ray_job_step(self, context: Context) -> RayJobStep:
        from airflow_provider_dj.engine.jobdir import ray_jobs
        from airflow_provider_dj.engine.runner.global_job import settle_stopped_global, verify_global
        from airflow_provider_dj.engine.storage.context import JobContext
        from airflow_provider_dj.hooks.ray_jobs import global_spec

        job_dir, op_index = self.job_dir, self.op_index
        job_id = JobContext(job_dir).job_id

        def succeeded(entry: dict, sid: str, message: str) -> dict:
            result = entry.get("results") or {"op_index": op_index}
            self.log.info("global op %d: %s", op_index, result)
            self.log.info("%s", f"Ray job {sid}: {message}")
            return result

        return RayJobStep(
            label=f"Global op {op_index}",
            again="run the global step again",
            submit=lambda client, spec_for: client.submit_or_attach_global(
                spec_for, job_dir=job_dir, job_id=job_id, op_index=op_index
            ),
            spec=lambda client, sid, attempt: global_spec(
                job_dir=job_dir,
                job_id=job_id,
                op_index=op_index,
                submission_id=sid,
                attempt=attempt,
                namespace=client.namespace,
                **self._spec_context(context),
            ),
            poll=lambda client, sid: client.poll_global(sid, job_dir, op_index),
            trigger={"op_index": op_index},
            record_entry=lambda sid: ray_jobs.find_submission(ray_jobs.read_global_record(job_dir, op_index), sid),
            verify=lambda: verify_global(job_dir, op_index),
            succeeded=succeeded,
            settle_stopped=lambda sid, request, defaults: settle_stopped_global(
                job_dir, job_id, op_index, sid, request
            ),
        )
