"""CheckpointSensor: wait until a job has checkpoints after an op, or has exported.

Two uses:

* The generated recipe DAG's barrier before a global op
  (``segment_index=``): every partition has committed its segment output
  and dedup keys.  It reads the job directory, not task states, so a
  partition task marked success by hand without its work done cannot slip
  past the barrier.
* Other DAGs: a training DAG waits for tonight's corpus export
  (``wait_for="export"``), or for the state after some op on all or some
  partitions (``after_op=<name or index>``, ``partitions=[...]``).

The job is named by ``job_dir``, or by ``work_dir`` + ``job_id``.  All three
modes — ``poke``, ``reschedule`` and ``deferrable=True`` (which hands the
wait to ``triggers.checkpoint.CheckpointTrigger``) — run the same check
(``engine.job.watch.check``) and end the same way: success when the target
is reached (or the job already completed), and an immediate
``AirflowFailException`` naming the failed partition(s) and their error
when the job has failed, rather than waiting for the timeout.
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any, Sequence

from airflow.configuration import conf
from airflow.sdk.bases.sensor import BaseSensorOperator
from airflow.sdk.exceptions import AirflowFailException

from airflow_provider_dj.core import fs as storage
from airflow_provider_dj.engine.job.watch import JobFailedError, WaitTargetError, check
from airflow_provider_dj.engine.jobdir.identity import job_id_for_run

if TYPE_CHECKING:
    from airflow.sdk import Context


def scheduled_job_id(dag_id: str, logical_date: datetime.datetime) -> str:
    """The job id a recipe DAG's *scheduled* run uses (validate derives it from
    the DAG id and run id when no job_id is given).  Lets another DAG name
    "tonight's" job: ``job_id="{{ dj_scheduled_job_id('my_recipe', logical_date) }}"``
    with ``user_defined_macros={"dj_scheduled_job_id": scheduled_job_id}``."""
    run_id = f"scheduled__{logical_date.isoformat()}"
    return job_id_for_run(dag_id, run_id, logical_date)


class CheckpointSensor(BaseSensorOperator):
    """Wait for a job's checkpoints after an op, a segment's output, or its export.

    :param job_dir: the job directory (``{work_dir}/{job_id}``); templated.
    :param work_dir: with ``job_id``, instead of ``job_dir``; templated.
    :param job_id: see ``work_dir``; templated.
    :param after_op: op name (unique in the recipe) or index; wait for its output.
    :param wait_for: ``"export"``: wait until the job completed (summary written).
    :param segment_index: the generated DAG's barrier: a segment's output plus dedup keys.
    :param partitions: partition ids to wait for (default all); not with ``wait_for``.
    :param deferrable: free the worker slot and poll from the triggerer (default: Airflow's
        ``[operators] default_deferrable``, as Airflow's own sensors).
    """

    template_fields: Sequence[str] = ("job_dir", "work_dir", "job_id")
    ui_color = "#fbe5c8"

    def __init__(
        self,
        *,
        job_dir: str | None = None,
        work_dir: str | None = None,
        job_id: str | None = None,
        after_op: int | str | None = None,
        wait_for: str | None = None,
        segment_index: int | None = None,
        partitions: list[int] | None = None,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("poke_interval", 5)
        kwargs.setdefault("timeout", 60 * 60)
        super().__init__(**kwargs)
        if (job_dir is None and not (work_dir and job_id)) or (job_dir is not None and (work_dir or job_id)):
            raise ValueError(f"{self.task_id}: give job_dir, or both work_dir and job_id (not both ways)")
        targets = [t for t in (after_op is not None, wait_for is not None, segment_index is not None) if t]
        if len(targets) != 1:
            raise ValueError(
                f"{self.task_id}: give exactly one of after_op=<op name or index>, wait_for='export', segment_index=<n>"
            )
        if wait_for is not None and wait_for != "export":
            raise ValueError(f"{self.task_id}: wait_for must be 'export', got {wait_for!r}")
        if wait_for is not None and partitions is not None:
            raise ValueError(
                f"{self.task_id}: partitions= applies to after_op/segment_index; an export is all or nothing"
            )
        if partitions is not None and (
            not isinstance(partitions, (list, tuple))
            or not all(isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in partitions)
        ):
            raise ValueError(
                f"{self.task_id}: partitions must be a list of partition ids (ints >= 0), got {partitions!r}"
            )
        self.job_dir = job_dir
        self.work_dir = work_dir
        self.job_id = job_id
        self.after_op = after_op
        self.wait_for = wait_for
        self.segment_index = segment_index
        self.partitions = list(partitions) if partitions is not None else None
        self.deferrable = deferrable

    @property
    def resolved_job_dir(self) -> str:
        return self.job_dir or storage.join(self.work_dir, self.job_id)

    def _target(self) -> dict:
        return {
            "after_op": self.after_op,
            "segment_index": self.segment_index,
            "wait_for": self.wait_for,
            "partitions": self.partitions,
        }

    def poke(self, context: Context) -> bool:
        try:
            st = check(self.resolved_job_dir, **self._target())
        except JobFailedError as exc:
            raise AirflowFailException(str(exc)) from None
        except WaitTargetError as exc:
            raise AirflowFailException(f"{self.resolved_job_dir}: {exc}") from None
        self.log.info("%s", st.message)
        return st.done

    def execute(self, context: Context) -> Any:
        if not self.deferrable:
            return super().execute(context=context)
        if self.poke(context):  # already there: no trip through the triggerer
            return None
        from airflow_provider_dj.triggers.checkpoint import CheckpointTrigger

        self.defer(
            trigger=CheckpointTrigger(
                job_dir=self.resolved_job_dir, poke_interval=float(self.poke_interval), **self._target()
            ),
            method_name="execute_complete",
            timeout=datetime.timedelta(seconds=self.timeout),
        )

    def execute_complete(self, context: Context, event: dict | None = None) -> None:
        if not event:
            raise AirflowFailException(f"{self.task_id}: the trigger returned no event")
        status = event.get("status")
        if status == "success":
            self.log.info("%s (after %s trigger polls)", event.get("message"), event.get("polls"))
            return None
        raise AirflowFailException(event.get("message") or f"{self.task_id}: trigger ended with {status}")
