"""``partition_stopped`` for the partitions a stop ended that could not write it themselves.

A partition that meets a stop at a committed boundary reports it itself (engine/execution).  One that
a forced stop killed mid-op, or whose Ray Job was ended before it could report, cannot: the process
that saw the stop end it (the group's dispatch, or the task that submitted its Ray Job) reports it
here, once per partition run, naming the op the partition was inside when its heartbeat
says so.
"""

from __future__ import annotations

from airflow_provider_dj import settings
from airflow_provider_dj.core import fs as storage
from airflow_provider_dj.engine.jobdir.events import EventLog, read_events
from airflow_provider_dj.engine.jobdir.heartbeat import read_heartbeat
from airflow_provider_dj.engine.jobdir.stop_control import request_time

#: A heartbeat's stages inside an op, before the op's checkpoint is committed.
IN_OP = frozenset({"op", "op_done"})
#: The events that start or end a partition's run of a segment.
RUN_EVENTS = frozenset({"partition_start", "partition_complete", "partition_failed", "partition_stopped"})


def report_stopped_partitions(
    job_dir: str,
    segment_index: int,
    partition_ids: list[int],
    request: dict,
    *,
    note: str,
    event_defaults: dict | None = None,
) -> list[int]:
    """Write ``partition_stopped`` for each of ``partition_ids`` (of segment ``segment_index``) whose run has
    not reported its end: a partition killed by a forced stop, or one whose Ray Job ended before it could
    report, cannot write it itself, and one that a stop ended before it started has no run at all.  One
    event per partition and run: a partition whose latest event of the segment is already a
    ``partition_stopped`` is skipped.  When the partition's heartbeat says it was inside an op of this
    segment when ``request`` came, the event names it (``op_index``, ``op_name``).  Returns the
    partitions reported."""
    latest: dict = {}
    for e in read_events(job_dir):  # in order: the last one of each partition wins
        if e.get("event_type") in RUN_EVENTS and e.get("segment") == segment_index:
            latest[e.get("partition_id")] = e["event_type"]
    todo = [pid for pid in partition_ids if latest.get(pid) != "partition_stopped"]
    since = request_time(request)
    log = EventLog(job_dir, storage.basename(job_dir), defaults=event_defaults)
    fresh = since - 2 * float(settings.get("heartbeat_interval_s"))  # a live partition beats at least this often
    for pid in todo:
        beat = read_heartbeat(job_dir, pid) or {}
        inside = (beat.get("segment"), beat.get("ended")) == (segment_index, None) and beat.get("stage") in IN_OP
        inside = inside and float(beat.get("beat_at") or 0) >= fresh
        log.emit(
            "partition_stopped",
            partition_id=pid,
            segment=segment_index,
            status="stopped",
            op_index=beat.get("op_index") if inside else None,
            op_name=beat.get("op_name") if inside else None,
            force=bool(request.get("force")),
            note=note,
        )
    return todo
