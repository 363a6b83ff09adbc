"""Ray Jobs mode: a job's stop reaching the Ray Jobs its records say are running (``dj-airflow stop``).

Each group's, global step's or export's record in the job directory (engine/jobdir/ray_jobs.py) names
the dashboard its submission went to; :func:`stop_running_groups` asks each of those dashboards to stop
the submissions still running there, and reports per submission what happened, never raising for a
dashboard that does not answer.
"""

from __future__ import annotations

import dataclasses
import socket
import urllib.parse
from dataclasses import dataclass

from airflow_provider_dj.engine.jobdir import ray_jobs
from airflow_provider_dj.hooks.ray_jobs import RayDashboardUnreachableError, RayJobsClient, public_address

#: Seconds ``dj-airflow stop`` waits for a dashboard's port before it reports the dashboard unreachable.
STOP_CONNECT_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class RayJobStop:
    """What a job's stop did to one group's (or a global step's: ``op_index`` set, no segment or group; or
    the export's: ``step`` is ``"export"``) running Ray Job.

    ``outcome``: ``stopped`` (Ray stops it: SIGTERM to its driver, SIGKILL a few seconds later),
    ``ended`` (Ray says it had already ended), ``not_stopped`` (``reason`` says why: the dashboard does
    not answer or refused, or the record names none).  The job's stop request stays either way."""

    segment_index: int | None
    group_id: int | None
    submission_id: str
    address: str
    outcome: str
    reason: str = ""
    op_index: int | None = None
    step: str | None = None

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def line(self) -> str:
        """One line for a person: the submission, the group and what happened to it."""
        what = {"stopped": "stop requested from Ray", "ended": "had already ended on Ray"}.get(self.outcome)
        where = f" at {self.address}" if self.address else ""
        if self.step == "export":
            unit = "export"
        elif self.op_index is not None:
            unit = f"global op {self.op_index}"
        else:
            unit = f"segment {self.segment_index}, group {self.group_id}"
        head = f"Ray job {self.submission_id} ({unit}){where}"
        return f"{head}: {what}" if what else f"{head}: NOT stopped: {self.reason}"


def stop_running_groups(
    job_dir: str, *, address: str | None = None, connect_timeout_s: float = STOP_CONNECT_TIMEOUT_S
) -> list[RayJobStop]:
    """Ask Ray to stop each submission the job directory's records say is running
    (``engine/jobdir/ray_jobs.running_submissions``), at the dashboard its record names or at ``address``
    (``dj-airflow stop --ray-address``).  [] for a job that never ran in Ray Jobs mode.  A dashboard that
    does not answer is asked once, within ``connect_timeout_s``; nothing here raises for a dashboard: each
    submission's :class:`RayJobStop` says what happened."""
    clients: dict[str, RayJobsClient | str] = {}
    out = []
    for record, entry in ray_jobs.running_submissions(job_dir):
        where = address or entry.get("dashboard_address") or ""
        if record.get("step") == "export":
            unit: dict = dict(segment_index=None, group_id=None, step="export")
        elif "op_index" in record:
            unit = dict(segment_index=None, group_id=None, op_index=int(record["op_index"]))
        else:
            unit = dict(segment_index=int(record["segment_index"]), group_id=int(record["group_id"]))
        stop = dict(**unit, submission_id=str(entry["submission_id"]), address=public_address(where))
        if not where:
            why = "its record names no Ray dashboard: pass one (dj-airflow stop --ray-address http://<head>:8265)"
            out.append(RayJobStop(**stop, outcome="not_stopped", reason=why))
            continue
        if where not in clients:
            clients[where] = _stop_client(where, connect_timeout_s)
        client = clients[where]
        if isinstance(client, str):
            out.append(RayJobStop(**stop, outcome="not_stopped", reason=client))
            continue
        try:
            stopped, why = client.try_stop(stop["submission_id"])
        except Exception as exc:  # noqa: BLE001 - a dashboard that dies meanwhile is reported, not raised
            stopped, why = None, f"{type(exc).__name__}: {exc}"
        outcome = "stopped" if stopped else ("ended" if stopped is False else "not_stopped")
        out.append(RayJobStop(**stop, outcome=outcome, reason=why))
    return out


def _stop_client(address: str, timeout_s: float) -> RayJobsClient | str:
    """A client of the dashboard at ``address``, or why there is none.  Its port is tried first, within
    ``timeout_s``: Ray's client waits without a limit on a host that does not answer."""
    shown = public_address(address)
    try:
        parts = urllib.parse.urlsplit(address)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        with socket.create_connection((parts.hostname or "", port), timeout=timeout_s):
            pass
        return RayJobsClient(address)
    except RayDashboardUnreachableError as exc:
        cause = exc.__cause__ or exc
        return f"the Ray dashboard at {shown} does not answer ({type(cause).__name__}: {cause})"
    except (OSError, ValueError) as exc:
        return f"the Ray dashboard at {shown} does not answer ({type(exc).__name__}: {exc})"
