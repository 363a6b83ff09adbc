"""The watchdog: a running partition with no progress for ``partition.stall_timeout_s`` is stalled.

Whoever waits on a group's partitions (the Ray dispatch, the local pool) asks the watchdog at each of
its polls which of the partitions in flight have stalled, cancels those (the process goes: a hung
call cannot be interrupted from inside), and asks it what to do next: run the partition again from
its checkpoints, ``partition.stall_retries`` times (once by default), then fail it with
:class:`StalledPartitionError`, whose message names the partition, its row range, the op, the rows
done in it and the last heartbeat.  Nothing committed is lost: the checkpoints before the stall stay,
and the next run resumes from them.

Progress is read from the partition's heartbeat file (engine/jobdir/heartbeat.py) and timed with the
waiter's own clock from the moment it first saw the current ``progress_seq``, so the nodes' clocks
need not agree.  A partition not started yet (queued behind others for a CPU) has no heartbeat of
this run and is never stalled; the heartbeat's ``run`` token, read before the submission, tells a
file an earlier try left from this run's.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Iterable

from airflow_provider_dj.core.errors import DJError
from airflow_provider_dj.engine.jobdir.heartbeat import read_heartbeat
from airflow_provider_dj.engine.jobdir.layout import LOGS_DIR, partition_name
from airflow_provider_dj.engine.jobdir.progress_log import append_line, partition_log_path

if TYPE_CHECKING:
    from airflow_provider_dj.engine.config.schema import Recipe
    from airflow_provider_dj.engine.jobdir.events import EventLog

log = logging.getLogger(__name__)


class StalledPartitionError(DJError, RuntimeError):
    """A partition made no progress for ``partition.stall_timeout_s``, every time it was run."""

    def __init__(self, message: str, *, partition_id: int, heartbeat: dict[str, Any] | None) -> None:
        super().__init__(message)
        self.partition_id = partition_id
        self.heartbeat = heartbeat


@dataclass(frozen=True)
class StallPolicy:
    timeout_s: float | None  # None: the watchdog is off
    retries: int = 1

    @classmethod
    def of_recipe(cls, recipe: Recipe) -> StallPolicy:
        extra = recipe.partition.extra
        return cls(extra.get("stall_timeout_s"), int(extra.get("stall_retries", 1)))

    @property
    def enabled(self) -> bool:
        return self.timeout_s is not None


@dataclass
class _Watch:
    """What the waiter knows of one partition's current run."""

    prior_run: str | None  # the heartbeat token found before the submission (an earlier run's file)
    seq: int | None = None  # the progress_seq last seen
    seen_at: float = 0.0  # when the waiter first saw it (its monotonic clock)
    beat: dict[str, Any] | None = None


def watchdog_for(
    job_dir: str, segment_index: int, *, try_number: int | None, event_defaults: dict[str, Any] | None
) -> Watchdog:
    """The watchdog of one group's wait, with the job's policy; its events go to the waiter's event log."""
    from airflow_provider_dj.engine.jobdir.events import EventLog
    from airflow_provider_dj.engine.storage.context import JobContext

    ctx = JobContext(job_dir)
    policy = StallPolicy.of_recipe(ctx.recipe)
    events = None
    if policy.enabled:
        events = EventLog(job_dir, ctx.job_id, defaults=dict(event_defaults or {}, try_number=try_number))
    return Watchdog(job_dir, segment_index, policy, events)


class Watchdog:
    """The stall check of one group's wait: ``submitted`` per run, ``stalled`` at each poll."""

    def __init__(self, job_dir: str, segment_index: int, policy: StallPolicy, events: EventLog | None = None) -> None:
        self.job_dir = job_dir
        self.segment_index = segment_index
        self.policy = policy
        self.events = events
        self.watches: dict[int, _Watch] = {}
        self.stalls: dict[int, int] = {}  # partition -> how many times it stalled in this wait
        # Heartbeat files are read at most this often (an object store pays a request per read).
        self.check_every_s = min(5.0, float(policy.timeout_s or 0.0) / 4) if policy.enabled else 0.0
        self._last_check = float("-inf")

    def submitted(self, partition_id: int) -> None:
        """A run of the partition was just submitted: forget what was seen of earlier runs."""
        if self.policy.enabled:
            beat = read_heartbeat(self.job_dir, partition_id)
            self.watches[partition_id] = _Watch(prior_run=(beat or {}).get("run"))

    def stalled(self, partition_ids: Iterable[int], now: float | None = None) -> list[int]:
        """Of ``partition_ids`` (the ones in flight), those with no progress for the timeout."""
        if not self.policy.enabled:
            return []
        now = time.monotonic() if now is None else now
        if now - self._last_check < self.check_every_s:
            return []
        self._last_check = now
        out = []
        for pid in partition_ids:
            watch = self.watches.get(pid)
            if watch is None:
                continue
            beat = read_heartbeat(self.job_dir, pid)
            if beat is None or beat.get("run") == watch.prior_run or beat.get("ended"):
                continue  # not started yet (or just ended): nothing to time
            if beat.get("progress_seq") != watch.seq:
                watch.seq, watch.seen_at = beat.get("progress_seq"), now
            watch.beat = beat
            if now - watch.seen_at > float(self.policy.timeout_s or 0.0):
                out.append(pid)
        return out

    def cancelled(self, partition_id: int) -> StalledPartitionError | None:
        """The stalled partition's run was cancelled: record it; None to run it again, else its error."""
        self.stalls[partition_id] = n = self.stalls.get(partition_id, 0) + 1
        beat = (self.watches.get(partition_id) or _Watch(None)).beat
        retry = n <= self.policy.retries
        where = describe_stall(beat, self.policy.timeout_s)
        action = f"run again from its checkpoint ({n} of {self.policy.retries})" if retry else "failed"
        log.warning("partition %d of segment %d stalled: %s; %s", partition_id, self.segment_index, where, action)
        self._record(partition_id, beat, n, retry, where, action)
        if retry:
            return None
        message = (
            f"partition {partition_id}{_rows(beat)} of segment {self.segment_index} stalled: {where}; "
            f"it was run {n} time(s), every time without progress for partition.stall_timeout_s="
            f"{self.policy.timeout_s:g}s. Its committed checkpoints are kept: find what hangs (the op's "
            f"model or endpoint; {LOGS_DIR}/{partition_name(partition_id)}.log), then clear the task to resume, "
            f"or raise partition.stall_timeout_s if the op is only slow"
        )
        return StalledPartitionError(message, partition_id=partition_id, heartbeat=beat)

    def _record(self, pid: int, beat: dict[str, Any] | None, n: int, retry: bool, where: str, action: str) -> None:
        fields = {k: (beat or {}).get(k) for k in ("op_index", "op_name", "rows_in", "rows_done", "stage")}
        if self.events is not None:
            self.events.emit(
                "partition_stalled",
                partition_id=pid,
                segment=self.segment_index,
                stall_timeout_s=self.policy.timeout_s,
                last_heartbeat=_utc((beat or {}).get("beat_at")),
                stalls=n,
                action="retry" if retry else "fail",
                status="stalled",
                **fields,
            )
            if not retry:
                self.events.emit(
                    "partition_failed",
                    partition_id=pid,
                    segment=self.segment_index,
                    error_message=f"stalled: {where}",
                    status="failed",
                    reason="stalled",
                )
        try:
            append_line(
                partition_log_path(self.job_dir, pid), f"[p{pid} seg{self.segment_index}] STALLED: {where}; {action}"
            )
        except OSError:
            pass


def describe_stall(beat: dict[str, Any] | None, timeout_s: float | None) -> str:
    """'no progress for 30s at op 2 (fix_unicode_mapper), 0 of 500 rows done; last heartbeat 12:00:03Z (1.2s before)'."""
    text = f"no progress for {float(timeout_s or 0):g}s"
    if not beat:
        return text
    stage, op_index, op_name = beat.get("stage"), beat.get("op_index"), beat.get("op_name")
    if op_index is not None:
        text += f" at op {op_index}" + (f" ({op_name})" if op_name else "")
        if stage == "key_phase":
            text += " computing its keys for the global step"
    elif stage:
        text += f" while {'loading its checkpoint' if stage == 'resume' else stage}"
    if beat.get("rows_in") is not None and beat.get("rows_done") is not None:
        text += f", {beat['rows_done']:,} of {beat['rows_in']:,} rows done"
    if beat.get("beat_at"):
        text += f"; last heartbeat {_utc(beat['beat_at'])} from {beat.get('host')} pid {beat.get('pid')}"
    return text


def _rows(beat: dict[str, Any] | None) -> str:
    if not beat or beat.get("start_row") is None:
        return ""
    return f" (rows {beat['start_row']}-{beat['end_row'] - 1})"


def _utc(ts: float | None) -> str | None:
    if ts is None:
        return None
    return datetime.fromtimestamp(float(ts), tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
