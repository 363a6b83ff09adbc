"""Ray Jobs mode: a partition group, a global step or the export runs as one Ray Job whose driver is on the cluster.

``RayJobsClient`` is a small client over Ray's ``JobSubmissionClient`` (the dashboard's HTTP API):
submit, status, log tail, stop, and :meth:`RayJobsClient.submit_or_attach`, which finds a group's
existing submission instead of starting a duplicate.  The group's submission ids are deterministic
(engine/jobdir/ray_jobs.py), so any submitter walks the same ids on the cluster: a running or
pending one is attached to, a succeeded one is trusted once the group's checkpoints are verified,
and after a failed or stopped one the next id (``-r<n>``) is submitted, whose driver resumes from the
checkpoints.  Where the cluster has forgotten a submission (a restarted head), the drivers' record
in the job directory says how it ended.

The client is built before anything is submitted or written: a dashboard that does not answer is
refused (:class:`RayDashboardUnreachableError`, naming its address) with the job directory untouched.
The provider-version and job-directory checks run in the driver on the cluster
(engine/runner/group_job.py), which also writes nothing when it refuses.

Each submission carries the dashboard's address (credentials removed) and its time, which its driver
keeps in the group's record: the job view shows them, and :func:`hooks.ray_jobs_stop.stop_running_groups` (``dj-airflow
stop``) stops the submissions the records say are running there, reporting any it could not reach.

A global op's step (``GlobalOpOperator``) is submitted the same way
(:meth:`RayJobsClient.submit_or_attach_global`, driver engine/runner/global_job.py), under its own
deterministic ids (``...-op<i>``, ``-r<n>``); it counts as done when every partition's keep mask is
committed.  The job's export (``ExportOperator``) likewise (:meth:`RayJobsClient.submit_or_attach_export`,
driver engine/runner/export_job.py, ids ``...-export``, ``-r<n>``); it counts as done when the job's
summary says ``completed``.  A new job's planning in Ray Jobs mode (the validate task) likewise
(:meth:`RayJobsClient.submit_or_attach_plan`, driver engine/runner/plan_job.py, ids ``...-plan-<recipe
digest>``, ``-r<n>``); it counts as done while its plan file is there for that recipe.

Only the connection's allowlisted extras reach Ray: ``runtime_env`` goes to ``submit_job``,
``namespace`` to the driver's ``ray.init``; nothing else of the extra is passed on.
"""

from __future__ import annotations

import dataclasses
import logging
import socket
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any, Callable

from airflow_provider_dj import __version__
from airflow_provider_dj.core.errors import DJError
from airflow_provider_dj.engine.jobdir import ray_jobs
from airflow_provider_dj.engine.planning.execution_group import ExecutionGroup
from airflow_provider_dj.engine.runner.export_job import ExportJobSpec, verify_export
from airflow_provider_dj.engine.runner.global_job import GlobalJobSpec, step_settings, verify_global
from airflow_provider_dj.engine.runner.group_job import (
    EXIT_REFUSED,
    REFUSED_PREFIX,
    GroupJobSpec,
    entrypoint,
    verify_group,
)
from airflow_provider_dj.engine.runner.plan_job import PlanJobSpec, plan_settings, read_planned, recipe_digest

log = logging.getLogger(__name__)

#: Ray's job states, as ``JobStatus`` spells them.
ACTIVE = frozenset({"PENDING", "RUNNING"})
TERMINAL = frozenset({"SUCCEEDED", "FAILED", "STOPPED"})
#: At most this many submissions of one group are looked up on the cluster (one HTTP call each).
MAX_ATTEMPTS = 1000


class RayDashboardUnreachableError(DJError, ConnectionError):
    """The Ray dashboard named by the ``ray`` connection does not answer; nothing was submitted."""


class RayJobSubmitError(DJError, RuntimeError):
    """The dashboard refused a submission (not because a submission of that id already exists)."""


class RayJobFailedError(DJError, RuntimeError):
    """A group's (or a global step's) Ray Job ended without committing its partitions (keep masks); the
    message carries its log tail.  A retry (or a UI clear) submits it again and resumes from what is
    committed."""


def is_dashboard_address(address: str | None) -> bool:
    """A Ray Jobs address (the dashboard's HTTP API) rather than a GCS or ``ray://`` address."""
    return bool(address) and address.split("://", 1)[0].lower() in ("http", "https")


def public_address(address: str) -> str:
    """``address`` without credentials in its URL (``http://user:pw@head:8265`` -> ``http://head:8265``):
    what the job directory may keep of it."""
    parts = urllib.parse.urlsplit(address)
    if "@" not in parts.netloc:
        return address
    return urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))


@dataclass(frozen=True)
class GroupSubmission:
    """Where a group's (or a global step's) Ray Job stands after :meth:`RayJobsClient.submit_or_attach`
    (:meth:`RayJobsClient.submit_or_attach_global`).

    ``action``: ``submitted`` (first submission), ``resubmitted`` (after a failed or stopped one),
    ``attached`` (one is pending or running), ``succeeded`` (one succeeded and the checkpoints are
    all there: nothing to run)."""

    submission_id: str
    attempt: int
    action: str
    status: str
    note: str = ""


class RayJobsClient:
    """Ray's Job Submission API at ``address`` (``http://head:8265``), for partition groups and global steps."""

    def __init__(
        self,
        address: str,
        *,
        runtime_env: dict | None = None,
        namespace: str | None = None,
        python: str = "python",
        client_factory: Callable[[str], Any] | None = None,
    ) -> None:
        self.address = address
        self.runtime_env = runtime_env
        self.namespace = namespace
        self.python = python
        try:
            if client_factory is None:
                from ray.job_submission import JobSubmissionClient

                client_factory = JobSubmissionClient
            self._client = client_factory(address)  # checks the connection (GET /api/version)
        except Exception as exc:
            raise RayDashboardUnreachableError(
                f"the Ray dashboard at {address} does not answer ({type(exc).__name__}: {exc}); check the `ray` "
                f"connection's address (the dashboard's HTTP address, port 8265 by default) and that the head runs "
                f"its dashboard (`ray start --head --include-dashboard=true`, Ray's `default` extra). Nothing was "
                f"submitted or written"
            ) from exc

    # -- one submission --------------------------------------------------------
    def info(self, submission_id: str) -> Any | None:
        """The submission's ``JobDetails``, or None when the cluster does not know it."""
        try:
            return self._client.get_job_info(submission_id)
        except RuntimeError as exc:
            if "does not exist" in str(exc) or "404" in str(exc):
                return None
            raise

    def status(self, submission_id: str) -> str | None:
        info = self.info(submission_id)
        return None if info is None else str(getattr(info.status, "value", info.status))

    def logs_tail(self, submission_id: str, lines: int = 40) -> str:
        """The last ``lines`` lines of the driver's log ('' when the cluster has none)."""
        try:
            text = self._client.get_job_logs(submission_id)
        except Exception as exc:  # noqa: BLE001 - a log tail is best effort: the failure is reported anyway
            return f"(no log from the Ray dashboard at {self.address}: {exc})"
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, submission_id: str, *, attempts: int = 3, pause_s: float = 1.0) -> bool:
        """Ask Ray to stop the submission (SIGTERM to its driver, then SIGKILL); False when it had ended,
        or when the dashboard refused ``attempts`` times ``pause_s`` apart (a busy dashboard's refusal is
        not the last word on a running job: the one stop a user's action sends must not be lost to it)."""
        why = ""
        for attempt in range(attempts):
            stopped, why = self.try_stop(submission_id)
            if stopped is not None:
                return stopped
            if attempt + 1 < attempts:
                time.sleep(pause_s)
        log.warning("stop of Ray job %s at %s refused %d times: %s", submission_id, self.address, attempts, why)
        return False

    def try_stop(self, submission_id: str) -> tuple[bool | None, str]:
        """:meth:`stop`, saying how it went: (True, '') Ray stops it; (False, '') it had ended; (None, why)
        the dashboard refused (a submission it does not know, say)."""
        try:
            return bool(self._client.stop_job(submission_id)), ""
        except RuntimeError as exc:
            return None, str(exc)

    def poll(self, submission_id: str, job_dir: str, segment_index: int, partition_ids: list[int]) -> tuple[str, str]:
        """(Ray's status of the submission, or ``UNKNOWN`` when the cluster has forgotten it; a line on the
        group's progress read from the job directory): one look, as the trigger and the waiting worker take it."""
        status = self.status(submission_id) or "UNKNOWN"
        try:
            _, progress = verify_group(job_dir, segment_index, partition_ids)
        except Exception as exc:  # noqa: BLE001 - progress is informative; Ray's status decides
            progress = f"progress not readable: {exc}"
        return status, progress

    def poll_global(self, submission_id: str, job_dir: str, op_index: int) -> tuple[str, str]:
        """:meth:`poll` for a global step: the progress line counts its committed keep masks."""
        status = self.status(submission_id) or "UNKNOWN"
        try:
            _, progress = verify_global(job_dir, op_index)
        except Exception as exc:  # noqa: BLE001 - progress is informative; Ray's status decides
            progress = f"progress not readable: {exc}"
        return status, progress

    def poll_export(self, submission_id: str, job_dir: str) -> tuple[str, str]:
        """:meth:`poll` for the export: the progress line says whether the export is committed."""
        status = self.status(submission_id) or "UNKNOWN"
        try:
            _, progress = verify_export(job_dir)
        except Exception as exc:  # noqa: BLE001 - progress is informative; Ray's status decides
            progress = f"progress not readable: {exc}"
        return status, progress

    def refusal(self, submission_id: str) -> str | None:
        """Why the submission could not start, when a retry would only meet the same refusal: its driver
        refused before any work (another provider version, a job directory this cluster does not see),
        or its runtime environment did not install.  None for any other outcome."""
        info = self.info(submission_id)
        error_type = getattr(info, "error_type", None)
        if str(getattr(error_type, "value", error_type) or "") == "RUNTIME_ENV_SETUP_FAILURE":
            return (
                f"Ray job {submission_id} at {self.address}: its runtime environment (the `ray` connection's "
                f"runtime_env) did not install on the cluster: {getattr(info, 'message', '')}; fix runtime_env or "
                f"put what it names in the cluster's image"
            )
        if info is not None and getattr(info, "driver_exit_code", None) == EXIT_REFUSED:
            line = next((ln for ln in self.logs_tail(submission_id).splitlines() if ln.startswith(REFUSED_PREFIX)), "")
            return f"Ray job {submission_id} at {self.address}: {line or 'refused before any work'}"
        return None

    def list_submissions(self, prefix: str = "dj-") -> list[Any]:
        """Every submission on the cluster whose id starts with ``prefix``."""
        return [j for j in self._client.list_jobs() if (j.submission_id or "").startswith(prefix)]

    def submit(
        self, spec: GroupJobSpec | GlobalJobSpec | ExportJobSpec | PlanJobSpec, *, agent_wait_s: float = 60.0
    ) -> str:
        """Submit ``spec``'s driver under ``spec.submission_id``; an id the cluster knows is not submitted
        twice (Ray refuses it), and this returns the id either way.  A head that has just started answers
        before its job agent can start drivers ("No available agent"): that is retried for
        ``agent_wait_s`` seconds."""
        spec = dataclasses.replace(spec, dashboard_address=public_address(self.address), submitted_at=time.time())
        deadline = time.monotonic() + agent_wait_s
        while True:
            try:
                return self._client.submit_job(
                    entrypoint=entrypoint(spec, self.python),
                    submission_id=spec.submission_id,
                    runtime_env=self.runtime_env or None,
                    entrypoint_num_cpus=0,  # the driver only waits; its partitions' tasks ask for CPUs
                    metadata=spec.metadata,
                )
            except RuntimeError as exc:
                if self.info(spec.submission_id) is not None:
                    return spec.submission_id  # another submitter was first: the same work, attach to it
                if "No available agent" in str(exc) and time.monotonic() < deadline:
                    time.sleep(1.0)
                    continue
                raise RayJobSubmitError(
                    f"the Ray dashboard at {self.address} refused submission {spec.submission_id}: {exc}"
                ) from exc

    # -- a group -------------------------------------------------------------
    def latest_on_cluster(self, base: str) -> tuple[int, Any | None]:
        """(attempt, JobDetails) of the group's newest submission the cluster knows; (-1, None) if none."""
        attempt, found = -1, None
        for n in range(MAX_ATTEMPTS):
            info = self.info(ray_jobs.submission_id(base, n))
            if info is None:
                break
            attempt, found = n, info
        return attempt, found

    def submit_or_attach(
        self,
        spec_for: Callable[[str, int], GroupJobSpec],
        *,
        job_dir: str,
        job_id: str,
        segment_index: int,
        group: ExecutionGroup,
    ) -> GroupSubmission:
        """Find the group's current submission and decide: attach, trust, or submit the next attempt.

        ``spec_for(submission_id, attempt)`` builds the driver's spec for a new submission."""
        gid = group.group_id
        return self._submit_or_attach(
            spec_for,
            ray_jobs.base_submission_id(job_dir, job_id, segment_index, gid),
            ray_jobs.latest_submission(ray_jobs.read_record(job_dir, segment_index, gid)),
            lambda: verify_group(job_dir, segment_index, list(group.partition_ids)),
            "the group",
        )

    def submit_or_attach_global(
        self, spec_for: Callable[[str, int], GlobalJobSpec], *, job_dir: str, job_id: str, op_index: int
    ) -> GroupSubmission:
        """:meth:`submit_or_attach` for global op ``op_index``'s step: its submissions are
        ``ray_jobs.global_base_submission_id``'s, its record ``ray_jobs.read_global_record``, and a
        succeeded one is trusted once every partition's keep mask is committed."""
        return self._submit_or_attach(
            spec_for,
            ray_jobs.global_base_submission_id(job_dir, job_id, op_index),
            ray_jobs.latest_submission(ray_jobs.read_global_record(job_dir, op_index)),
            lambda: verify_global(job_dir, op_index),
            f"global op {op_index}'s step",
        )

    def submit_or_attach_export(
        self, spec_for: Callable[[str, int], ExportJobSpec], *, job_dir: str, job_id: str
    ) -> GroupSubmission:
        """:meth:`submit_or_attach` for the job's export: its submissions are
        ``ray_jobs.export_base_submission_id``'s, its record ``ray_jobs.read_export_record``, and a
        succeeded one is trusted once the job's summary says ``completed``."""
        return self._submit_or_attach(
            spec_for,
            ray_jobs.export_base_submission_id(job_dir, job_id),
            ray_jobs.latest_submission(ray_jobs.read_export_record(job_dir)),
            lambda: verify_export(job_dir),
            "the export",
        )

    def submit_or_attach_plan(
        self,
        spec_for: Callable[[str, int], PlanJobSpec],
        *,
        job_dir: str,
        job_id: str,
        recipe: dict,
        proof_try: int | None = None,
    ) -> GroupSubmission:
        """:meth:`submit_or_attach` for planning a new job's input (``ray_jobs.plan_base_submission_id``'s
        ids, one series per effective recipe), or with ``proof_try`` set for proving a resumed job's input
        in that try of the validate task (``ray_jobs.proof_base_submission_id``'s); a succeeded one is
        trusted while its file is there for this recipe."""
        digest = recipe_digest(recipe)
        proof = proof_try is not None
        if proof:
            base = ray_jobs.proof_base_submission_id(job_dir, job_id, digest, proof_try)
        else:
            base = ray_jobs.plan_base_submission_id(job_dir, job_id, digest)
        work_dir = recipe["work_dir"]

        def verify() -> tuple[bool, str]:
            attempt, _ = self.latest_on_cluster(base)
            sid = ray_jobs.submission_id(base, max(attempt, 0))
            if read_planned(work_dir, job_id, sid, recipe, proof=proof) is not None:
                return True, f"its result is in {work_dir}'s planning folder"
            return False, f"there is no result of submission {sid}"

        return self._submit_or_attach(spec_for, base, None, verify, "the input proof" if proof else "the planning")

    def poll_plan(self, submission_id: str) -> tuple[str, str]:
        """(Ray's status of the planning's Ray Job, a line for the log)."""
        status = self.status(submission_id) or "UNKNOWN"
        return status, "planning the input on the cluster"

    def _submit_or_attach(
        self,
        spec_for: Callable[[str, int], Any],
        base: str,
        recorded: dict | None,
        verify: Callable[[], tuple[bool, str]],
        what: str,
    ) -> GroupSubmission:
        """Walk ``base``'s submissions on the cluster (and the latest its drivers ``recorded``, where the
        cluster forgot it), then attach to an active one, trust a succeeded one that ``verify`` confirms,
        or submit the next attempt."""
        attempt, info = self.latest_on_cluster(base)
        if recorded is not None and int(recorded.get("attempt", 0)) > attempt:
            # The cluster forgot the newest submission (a restarted head): its driver's record says.
            attempt, sid = int(recorded["attempt"]), recorded["submission_id"]
            if recorded.get("state") == "succeeded":
                done = self._verified(sid, attempt, "SUCCEEDED", verify, what)
                if done is not None:
                    return done
        elif info is not None:
            status = str(getattr(info.status, "value", info.status))
            sid = ray_jobs.submission_id(base, attempt)
            if status in ACTIVE:
                return GroupSubmission(sid, attempt, "attached", status)
            if status == "SUCCEEDED":
                done = self._verified(sid, attempt, status, verify, what)
                if done is not None:
                    return done
        nxt = attempt + 1
        sid = self.submit(spec_for(ray_jobs.submission_id(base, nxt), nxt))
        return GroupSubmission(sid, nxt, "resubmitted" if nxt else "submitted", self.status(sid) or "PENDING")

    def _verified(self, sid, attempt, status, verify, what) -> GroupSubmission | None:
        """A succeeded submission whose output is all committed; None when some is missing (removed
        since, or never written): then it is submitted again."""
        done, message = verify()
        if done:
            return GroupSubmission(sid, attempt, "succeeded", status, message)
        log.warning("Ray job %s succeeded but %s: submitting %s again", sid, message, what)
        return None


def _submitted(spec_cls, *, attempt: int, event_defaults: dict | None = None, **fields):
    """A driver's spec as this process submits it: this provider's version and this host's name.  The
    step-agnostic fields every caller passes (``namespace``, ``try_number``, ``run_id``, ``step_key``)
    go through as given."""
    return spec_cls(
        attempt=int(attempt),
        provider_version=__version__,
        submitter_host=socket.gethostname(),
        event_defaults=dict(event_defaults or {}),
        **fields,
    )


def group_spec(*, segment_index: int, group: ExecutionGroup, num_cpus: float = 1, **fields) -> GroupJobSpec:
    """A partition group's driver spec (``fields``: ``job_dir``, ``job_id``, ``submission_id``, ``attempt``
    and the task's ``namespace``, ``try_number``, ``run_id``, ``step_key``, ``event_defaults``)."""
    return _submitted(GroupJobSpec, segment_index=int(segment_index), group=group, num_cpus=num_cpus, **fields)


def global_spec(*, op_index: int, **fields) -> GlobalJobSpec:
    """A global step's driver spec (``fields`` as :func:`group_spec`'s), with this process's settings that
    plan the step (``global_job.STEP_SETTINGS``)."""
    return _submitted(GlobalJobSpec, op_index=int(op_index), settings=step_settings(), **fields)


def plan_spec(
    *,
    recipe: dict,
    job_id: str,
    submission_id: str,
    attempt: int,
    namespace: str | None = None,
    verify_job_dir: str = "",
) -> PlanJobSpec:
    """The planning driver's spec as this process submits it: this provider's version, this host's name
    and this process's settings that planning is checked with (``plan_job.PLAN_SETTINGS``);
    ``verify_job_dir``: prove that job directory's input instead of planning."""
    return PlanJobSpec(
        recipe=recipe,
        job_id=job_id,
        submission_id=submission_id,
        attempt=int(attempt),
        provider_version=__version__,
        submitter_host=socket.gethostname(),
        namespace=namespace,
        settings=plan_settings(),
        verify_job_dir=verify_job_dir,
    )


def export_spec(**fields) -> ExportJobSpec:
    """The export's driver spec (``fields`` as :func:`group_spec`'s)."""
    return _submitted(ExportJobSpec, **fields)
