"""``partition_stopped`` for partitions a stop ended that could not report it (engine.jobdir.stop_report).

Engine only, on a plain directory with real event files and heartbeats: nothing mocked.
"""

from __future__ import annotations

import json
import os
import time

from airflow_provider_dj.engine.jobdir.events import EventLog, read_events
from airflow_provider_dj.engine.jobdir.heartbeat import heartbeat_path
from airflow_provider_dj.engine.jobdir.stop_control import request_stop
from airflow_provider_dj.engine.jobdir.stop_report import report_stopped_partitions


def _stopped(job_dir: str) -> list[tuple]:
    return [(e["partition_id"], e.get("op_index"), e.get("note")) for e in read_events(job_dir, "partition_stopped")]


def test_each_partition_run_is_reported_once_naming_the_op_its_heartbeat_names(tmp_path):
    job_dir = str(tmp_path / "job")
    events = EventLog(job_dir, "job")
    for pid in (0, 1, 2):
        events.emit("partition_start", partition_id=pid, segment=0, status="running")
    events.emit("partition_stopped", partition_id=2, segment=0, status="stopped", after_op=1)  # it reported itself
    # Partition 0's last heartbeat: inside op 3 (a killed partition never writes "ended").
    beat = {"segment": 0, "stage": "op", "op_index": 3, "op_name": "words_num_filter", "ended": None}
    os.makedirs(os.path.dirname(heartbeat_path(job_dir, 0)), exist_ok=True)
    with open(heartbeat_path(job_dir, 0), "w") as fh:
        json.dump({**beat, "beat_at": time.time()}, fh)
    request = request_stop(job_dir, force=True, requested_by="tester")

    assert report_stopped_partitions(job_dir, 0, [0, 1, 2, 3], request, note="ended by a forced stop") == [0, 1, 3]
    note = "ended by a forced stop"
    assert sorted(_stopped(job_dir), key=lambda t: t[0]) == [
        (0, 3, note),  # killed inside op 3, as its heartbeat says
        (1, None, note),  # no heartbeat: the op is not known
        (2, None, None),  # reported itself: not again
        (3, None, note),  # never started: ended by the stop before it ran
    ]
    # A second look (the submitting task after the driver) writes nothing more.
    assert report_stopped_partitions(job_dir, 0, [0, 1, 2, 3], request, note="its Ray job was stopped") == []
    # A new run of partition 1 (a resume) that a later stop ends is reported again.
    time.sleep(0.01)
    events.emit("partition_start", partition_id=1, segment=0, status="running")
    assert report_stopped_partitions(job_dir, 0, [1], request_stop(job_dir, requested_by="t"), note="again") == [1]
