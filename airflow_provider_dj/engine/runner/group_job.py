"""The driver of one Ray Job: one execution group of one segment of a planned job, on the cluster it runs on.

``python -m airflow_provider_dj.engine.runner.group_job --spec '<json>'`` is the entrypoint a
submitter (hooks/ray_jobs.py, for ``PartitionGroupOperator`` in Ray Jobs mode) gives Ray's Job
Submission API.  It makes the call a partition-group task makes in its own process, ``run_group``
under the stop protocol with a ``RayDispatcher``, so checkpoints, events, lineage and the export are
the same bytes whichever mode ran the group; only the process that drives the Ray tasks differs, and
it lives on the cluster, so it outlives the submitter.

Before it touches anything it refuses (exit status 2, nothing written) a submitter of another
provider version (both are named) and a job directory this host does not see as the submitter
planned it: missing at the path (a work dir not mounted at the same path on the cluster's nodes), or
holding another job.  Then it records in the job directory what it is and how it ended
(engine/jobdir/ray_jobs.py).  Exit status: 0 done, 1 failed, 2 refused, 130 stopped.

The checks, the record's transitions and the stop handling are :class:`DriverRun`'s, which a global
step's driver (engine/runner/global_job.py) runs too, with its own record and work.

No Airflow import anywhere below this module: the cluster's image needs this package, not Airflow.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import socket
import sys
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, TypeVar

from airflow_provider_dj import __version__
from airflow_provider_dj.core import fs as storage
from airflow_provider_dj.core.errors import RefusedError
from airflow_provider_dj.engine.jobdir import ray_jobs, stop_control
from airflow_provider_dj.engine.jobdir.layout import EFFECTIVE_CONFIG, read_json
from airflow_provider_dj.engine.jobdir.stop_report import report_stopped_partitions
from airflow_provider_dj.engine.planning.execution_group import ExecutionGroup

log = logging.getLogger("dj.group_job")

MODULE = "airflow_provider_dj.engine.runner.group_job"
EXIT_OK, EXIT_FAILED, EXIT_REFUSED, EXIT_STOPPED = 0, 1, 2, 130
#: The line a refusal prints first, so a submitter can quote it from the Ray job's logs.
REFUSED_PREFIX = "refused before any work: "


class GroupJobRefusedError(RefusedError, RuntimeError):
    """The Ray Job cannot run this group (or global step) here; the message says what to change.  Nothing
    was written."""


class _Terminated(BaseException):
    """SIGTERM from Ray's ``stop_job``: end the group as stopped (a BaseException: no handler swallows it)."""


_Spec = TypeVar("_Spec", bound="DriverSpec")


def _plain(value: Any) -> Any:
    """A spec field's JSON form: a dataclass field (the execution group) as its ``to_dict``."""
    if hasattr(value, "to_dict"):
        return value.to_dict()
    raise TypeError(f"a driver spec field of type {type(value).__name__} has no JSON form")


class DriverSpec:
    """The JSON form every Ray Job driver's spec travels in (the entrypoint's one argument): its fields
    sorted, and unknown keys ignored on the way back, so a newer submitter's extra field is harmless."""

    __dataclass_fields__: ClassVar[dict[str, Any]]  # every spec class is a dataclass
    provider_version: str  # the submitter's, which the driver's must equal (``check_version``)
    submitter_host: str

    def to_json(self) -> str:
        return json.dumps(self.__dict__, sort_keys=True, separators=(",", ":"), default=_plain)

    @classmethod
    def from_json(cls: type[_Spec], text: str) -> _Spec:
        data = json.loads(text)
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass(frozen=True)
class GroupJobSpec(DriverSpec):
    """Everything a driver needs, passed by the submitter as one JSON argument."""

    job_dir: str
    job_id: str
    segment_index: int
    #: A plain dict in the JSON form; the dataclass once the spec is built (``__post_init__``).
    group: ExecutionGroup
    submission_id: str
    attempt: int
    provider_version: str
    submitter_host: str = ""
    try_number: int | None = None
    run_id: str | None = None
    step_key: str = ""
    event_defaults: dict[str, Any] = field(default_factory=dict)
    num_cpus: float = 1
    namespace: str | None = None
    #: Set by the submitter as it submits (hooks/ray_jobs.py): kept in the group's record, where the job
    #: view reads when the group was submitted and ``dj-airflow stop`` finds the dashboard to stop it at.
    dashboard_address: str = ""
    submitted_at: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "group", ExecutionGroup.of(self.group))

    @property
    def metadata(self) -> dict[str, Any]:
        """What the submission carries in Ray's job list."""
        return {"dj_job_id": self.job_id, "dj_segment": str(self.segment_index)}


def entrypoint(spec: Any, python: str = "python") -> str:
    """The Ray Job's entrypoint command line for ``spec`` (a shell command, quoted): the driver module its
    class names (``DRIVER_MODULE``: this one for a group, engine/runner/global_job.py for a global step)."""
    import shlex

    module = getattr(spec, "DRIVER_MODULE", MODULE)
    return f"{shlex.quote(python)} -m {module} --spec {shlex.quote(spec.to_json())}"


def check_version(spec: DriverSpec, installed: str = __version__) -> None:
    if spec.provider_version != installed:
        raise GroupJobRefusedError(
            f"provider version mismatch: the Ray cluster ({socket.gethostname()}) runs airflow-provider-dj "
            f"{installed}, the submitter ({spec.submitter_host or 'Airflow'}) runs {spec.provider_version}; "
            f"install airflow-provider-dj=={spec.provider_version} in the cluster's image (or the same version "
            f"on both sides) and submit again"
        )


def check_identity(spec: GroupJobSpec) -> None:
    """The job directory exists here at the submitter's path and holds the submitter's job."""
    host = socket.gethostname()
    config = storage.join(spec.job_dir, *EFFECTIVE_CONFIG.split("/"))
    if not storage.exists(config):
        what = "does not exist" if not storage.exists(spec.job_dir) else f"has no {EFFECTIVE_CONFIG}"
        raise GroupJobRefusedError(
            f"job directory {spec.job_dir} {what} on host {host} (where this Ray Job runs); the submitter "
            f"({spec.submitter_host or 'Airflow'}) planned it there: mount the work dir at the same path on every "
            f"node of the Ray cluster (or use an object-store URL as work_dir)"
        )
    found = read_json(config).get("job_id") or storage.basename(spec.job_dir)
    if found != spec.job_id:
        raise GroupJobRefusedError(
            f"job directory {spec.job_dir} on host {host} holds job {found}, not {spec.job_id}: the cluster sees "
            f"another work dir at this path; mount the submitter's work dir there"
        )


def uncommitted_partitions(job_dir: str, segment_index: int, partition_ids: list[int]) -> list[int]:
    """The partitions of ``partition_ids`` whose segment output (or the keys a following global op needs)
    has no commit marker."""
    from airflow_provider_dj.engine.storage.checkpoints import CheckpointStore
    from airflow_provider_dj.engine.storage.context import JobContext
    from airflow_provider_dj.engine.storage.global_op_state import keys_store

    ctx = JobContext(job_dir)
    plan = ctx.plan
    seg = plan.segments[segment_index]
    by_id = {p["partition_id"]: p for p in ctx.partitioning_info["partitions"]}
    store, keys = CheckpointStore(job_dir, ctx.storage_format), keys_store(job_dir)

    def committed(st: Any, i: int, pid: int) -> bool:
        op = plan.ops[i]
        return bool(st.is_committed(i, op.name, pid, by_id[pid]["content_hash"], op.fingerprint))

    target = seg.end - 1
    return [
        pid
        for pid in partition_ids
        if not (target < 0 or committed(store, target, pid))
        or not (seg.keys_for_global is None or committed(keys, seg.keys_for_global, pid))
    ]


def verify_group(job_dir: str, segment_index: int, partition_ids: list[int]) -> tuple[bool, str]:
    """Whether every partition of the group committed its segment output (and the keys a following
    global op needs), by their commit markers, as the barrier checks them: what a submitter checks
    before it trusts a Ray Job that reports success.  A completed job counts as done (retention may have
    removed its checkpoints).  Failures recorded for other groups do not matter here.  Returns (done, a
    line saying what is seen)."""
    from airflow_provider_dj.engine.job.completed_export import is_job_complete

    if is_job_complete(job_dir):
        return True, "the job is complete"
    missing = uncommitted_partitions(job_dir, segment_index, partition_ids)
    n = len(partition_ids)
    line = f"segment {segment_index}: {n - len(missing)}/{n} partitions of the group committed"
    return not missing, line + (f" (not yet: {missing})" if missing else "")


def _identity(spec: Any) -> dict[str, Any]:
    """What the record keeps of this driver: where it runs, and where and when it was submitted."""
    known = {"dashboard_address": spec.dashboard_address, "submitted_at": spec.submitted_at}
    return {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "provider_version": __version__,
        **{k: v for k, v in known.items() if v},
    }


class DriverRun:
    """One Ray Job driver's run: the checks, the record and the stop handling every driver shares (a
    partition group's here, a global step's in engine/runner/global_job.py).

    ``spec`` is the driver's spec (:class:`GroupJobSpec` or one with the same identity fields: job_dir,
    job_id, submission_id, attempt, provider_version, submitter_host, try_number, run_id, step_key,
    event_defaults, namespace, dashboard_address, submitted_at); ``record(state, identity=..., **fields)``
    writes a transition to the driver's record; ``cancel(reason)`` ends the Ray work it started (set it
    once that work's handle exists); ``what`` names the work in the driver's log."""

    def __init__(self, spec: Any, record: Callable[..., Any], *, what: str) -> None:
        self.spec = spec
        self._record = record
        self.what = what
        self.cancel: Callable[[str], Any] = lambda reason: None
        #: Set once Ray's stop_job reached this driver (SIGTERM) and the stop is recorded.
        self.terminated = threading.Event()

    def record(self, state: str, **fields: Any) -> None:
        self._record(state, identity=_identity(self.spec), **fields)

    def connect(self) -> Any:
        """The ``ray`` module, connected to the cluster this driver runs on (``address="auto"``)."""
        import ray

        if not ray.is_initialized():
            kwargs: dict[str, Any] = {"namespace": self.spec.namespace} if self.spec.namespace else {}
            ray.init(address="auto", ignore_reinit_error=True, log_to_driver=True, **kwargs)
            self.handle_sigterm()  # ray.init put its own handler (a bare exit) in place of ours
        return ray

    def handle_sigterm(self) -> Any:
        """Make Ray's ``stop_job`` (SIGTERM) end the work as stopped; returns the handler it replaced."""
        return signal.signal(signal.SIGTERM, lambda signum, frame: self._on_sigterm())

    def run(self, body: Callable[[], Any]) -> int:
        """Check, record, run ``body`` under the stop protocol, record how it ended; the exit status (see
        the module docstring).  ``body``'s result is the record's ``results``.

        However the work ends early, the record's ``stopped_by`` comes from the job directory: work that
        ends without success while the job's stop request is pending was stopped by it
        (``stop_request``), whichever of the stop's paths (the forced-stop watch, a stop point, Ray's
        SIGTERM) reached this driver first."""
        from airflow_provider_dj.engine.runner.stop import JobStopped, stoppable

        spec = self.spec
        try:
            check_version(spec)
            check_identity(spec)
        except GroupJobRefusedError as exc:
            print(f"{REFUSED_PREFIX}{exc}", file=sys.stderr, flush=True)
            return EXIT_REFUSED
        previous = self.handle_sigterm()
        try:
            self.record("started")
            results = stoppable(
                spec.job_dir,
                body,
                step_key=spec.step_key or spec.submission_id,
                try_number=spec.try_number,
                run_id=spec.run_id,
                event_defaults=spec.event_defaults,
                say=log.info,
                warn=log.warning,
            )
        except JobStopped as exc:
            self.record("stopped", error=str(exc)[:4000], stopped_by="stop_request")
            print(str(exc), file=sys.stderr, flush=True)
            return EXIT_STOPPED
        except BaseException as exc:  # noqa: BLE001 - SIGTERM's exception, Ray's own SIGTERM exit included
            return self._ended_early(exc)
        finally:
            signal.signal(signal.SIGTERM, previous)
        self.record("succeeded", results=results)
        return EXIT_OK

    def _ended_early(self, exc: BaseException) -> int:
        """Record how the work ended when it raised: stopped (by the pending stop request, else by Ray's
        ``stop_job``) for a SIGTERM or with a stop request pending, else failed.  Returns the exit status."""
        if self.terminated.is_set():  # SIGTERM: the handler recorded the stop; its exception may come out as another
            self.cancel("the Ray job was stopped (SIGTERM)")  # Ray would end them with the driver anyway
            return EXIT_STOPPED
        cause = _stop_cause(self.spec)
        if cause is not None or not isinstance(exc, Exception):  # a stop request, or a signal's exit (Ray's handler)
            cause = cause or _sigterm_cause(self.spec)
            if isinstance(exc, Exception):
                cause["error"] = f"{cause['error']}; the {self.what} ended with {type(exc).__name__}: {exc}"[:4000]
            self.record("stopped", **cause)
            self.cancel(f"the {self.what} was stopped")
            return EXIT_STOPPED
        self.record("failed", error=f"{type(exc).__name__}: {exc}"[:4000], fatal=_fatal(exc))
        log.error("%s failed", self.what, exc_info=exc)
        return EXIT_FAILED

    def _on_sigterm(self) -> None:
        """Ray's ``stop_job``: SIGTERM, then SIGKILL a few seconds later.  The stop is recorded here, at
        once, because the unwinding after it (cancelling the work's Ray tasks) may outlast that grace."""
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # one record, even if Ray signals twice
        self.record("stopped", **_sigterm_cause(self.spec))
        self.terminated.set()
        raise _Terminated()


def run_group_job(spec: GroupJobSpec) -> int:
    """Check, record, run the group, record how it ended; the exit status (see the module docstring)."""
    from airflow_provider_dj.engine.runner.dispatch import RayDispatcher
    from airflow_provider_dj.engine.runner.steps import run_group

    def record(state: str, **fields: Any) -> None:
        ray_jobs.record_transition(
            spec.job_dir,
            spec.segment_index,
            spec.group,
            spec.submission_id,
            state,
            job_id=spec.job_id,
            attempt=spec.attempt,
            **fields,
        )

    run = DriverRun(spec, record, what=f"group {spec.group.group_id} of segment {spec.segment_index}")
    dispatcher = RayDispatcher(run.connect, num_cpus=spec.num_cpus)
    run.cancel = dispatcher.cancel

    def body() -> list[dict[str, Any]]:
        results = run_group(
            spec.job_dir,
            spec.segment_index,
            spec.group,
            dispatcher,
            try_number=spec.try_number,
            event_defaults=spec.event_defaults,
            run_id=spec.run_id,
            say=log.info,
        )
        return [r.to_dict() for r in results]  # the record's ``results`` (JSON)

    return run.run(body)


def _fatal(exc: BaseException) -> bool:
    """A failure a retry would only repeat (the failure-rate guard): the submitter fails without retry."""
    from airflow_provider_dj.engine.execution.failure_guard import FailureRateExceededError

    return isinstance(exc, FailureRateExceededError) or isinstance(
        getattr(exc, "cause", None), FailureRateExceededError
    )


def _stop_cause(spec: Any) -> dict[str, Any] | None:
    """The record's ``stopped_by`` and ``error`` when the job's stop request is pending, else None."""
    try:
        request = stop_control.read_stop_request(spec.job_dir)
    except Exception:  # noqa: BLE001 - the stop must be recorded even if the job directory answers badly
        request = None
    if request is None:
        return None
    who = request.get("requested_by", "unknown")
    return {"stopped_by": "stop_request", "error": f"the job's stop request ({who}) stopped the Ray job"}


def _sigterm_cause(spec: Any) -> dict[str, Any]:
    """The record's ``stopped_by`` and ``error`` for a SIGTERM: ``stop_request`` when the job's stop request
    is pending (``dj-airflow stop`` asked Ray too: the task ends stopped, without a retry), else
    ``stop_job`` (someone stopped only this Ray Job: a retry submits the work again)."""
    cause = _stop_cause(spec)
    if cause is not None:
        return {**cause, "error": f"{cause['error']} (SIGTERM)"}
    return {"stopped_by": "stop_job", "error": "the Ray job was stopped (stop_job: SIGTERM to its driver)"}


def settle_stopped_group(
    job_dir: str,
    job_id: str,
    segment_index: int,
    group: ExecutionGroup,
    sid: str,
    request: dict[str, Any],
    *,
    event_defaults: dict[str, Any] | None = None,
) -> list[int]:
    """The submitter's side of a group whose Ray Job ended without success while the job's stop request
    was pending: that request stopped it, whatever the driver managed to record before Ray ended it.
    The submission's record then says ``stopped`` by ``stop_request``, and each partition of the group
    that did not commit its segment has its ``partition_stopped`` event.  Returns those partitions."""
    gid = group.group_id
    entry = ray_jobs.find_submission(ray_jobs.read_record(job_dir, segment_index, gid), sid) or {}
    if (entry.get("state"), entry.get("stopped_by")) != ("stopped", "stop_request"):
        who = request.get("requested_by", "unknown")
        ended = f"; its driver had recorded {entry['state']}: {entry.get('error')}" if entry.get("state") else ""
        base = ray_jobs.base_submission_id(job_dir, job_id, segment_index, gid)
        ray_jobs.record_transition(
            job_dir,
            segment_index,
            group,
            sid,
            "stopped",
            job_id=job_id,
            attempt=int(entry.get("attempt", ray_jobs.attempt_of(base, sid) or 0)),
            stopped_by="stop_request",
            error=f"the job's stop request ({who}) stopped the Ray job{ended}"[:4000],
            recorded_by="submitter",
        )
    missing = uncommitted_partitions(job_dir, segment_index, list(group.partition_ids))
    report_stopped_partitions(
        job_dir, segment_index, missing, request, note="its Ray job was stopped", event_defaults=event_defaults
    )
    return missing


def exit_status(body: Callable[[], int]) -> int:
    """``body()``'s exit status (a driver's run); :data:`EXIT_STOPPED` when Ray's SIGTERM came while the
    end was being recorded (the handler recorded the stop)."""
    try:
        return body()
    except _Terminated:
        return EXIT_STOPPED


def driver_main(
    argv: list[str] | None, *, module: str, doc: str | None, spec_cls: type[DriverSpec], run: Callable[..., Any]
) -> int:
    """A Ray Job driver's entrypoint: ``--spec`` (the submitter's ``spec_cls`` as JSON) parsed, logging to
    stdout (Ray's job log), ``run(spec)``'s exit status (:func:`exit_status`)."""
    parser = argparse.ArgumentParser(prog=f"python -m {module}", description=doc)
    parser.add_argument("--spec", required=True, help=f"the submitter's {spec_cls.__name__} as JSON")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stdout)
    return exit_status(lambda: run(spec_cls.from_json(args.spec)))


def apply_submitter_settings(values: dict[str, Any], allowed: tuple[str, ...]) -> None:
    """Make ``values`` (the ``allowed`` ``[dj]`` settings as the submitter has them set, raw strings) this
    driver's: set under the names read first (``AIRFLOW__DJ__<KEY>``), then the settings read again."""
    from airflow_provider_dj import settings

    for key, value in values.items():
        if key in allowed and value is not None:
            os.environ[settings.AIRFLOW_ENV_PREFIX + key.upper()] = str(value)
    settings.reset()


def main(argv: list[str] | None = None) -> int:
    return driver_main(argv, module=MODULE, doc=__doc__, spec_cls=GroupJobSpec, run=run_group_job)


if __name__ == "__main__":
    sys.exit(main())
