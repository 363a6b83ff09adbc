"""The watchdog's decisions and the heartbeat it reads, on real files in a job directory.

The watchdog is given its clock (``now``) so that "no progress for the timeout" is a fact of the
test's own numbers, not of how fast this machine runs.
"""

from __future__ import annotations

import json
import os
import time

import pytest

from airflow_provider_dj.engine.execution.watchdog import (
    StalledPartitionError,
    StallPolicy,
    Watchdog,
    describe_stall,
)
from airflow_provider_dj.engine.jobdir.events import EventLog, read_events
from airflow_provider_dj.engine.jobdir.heartbeat import PartitionHeartbeat, heartbeat_path, read_heartbeat
from airflow_provider_dj.engine.jobdir.progress_log import partition_log_path

TIMEOUT = 10.0


def _beat(job_dir: str, pid: int = 0, **fields) -> None:
    """Write partition ``pid``'s heartbeat file as a running task would."""
    beat = {
        "partition_id": pid,
        "run": "run-b",
        "progress_seq": 1,
        "start_row": 0,
        "end_row": 100,
        "stage": "op",
        "op_index": 2,
        "op_name": "fix_unicode_mapper",
        "rows_in": 50,
        "rows_done": 10,
        "beat_at": 1_800_000_000.0,
        "host": "node-1",
        "pid": 4242,
        "ended": None,
    }
    beat.update(fields)
    path = heartbeat_path(job_dir, pid)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as fh:
        json.dump(beat, fh)


def _watchdog(job_dir: str, retries: int = 1, events=None) -> Watchdog:
    return Watchdog(job_dir, 1, StallPolicy(TIMEOUT, retries), events)


def test_a_partition_without_a_heartbeat_of_this_run_is_never_stalled(tmp_path):
    job_dir = str(tmp_path)
    dog = _watchdog(job_dir)
    dog.submitted(0)  # queued behind others: no file yet
    assert dog.stalled([0], now=100.0) == []
    assert dog.stalled([0], now=100.0 + 10 * TIMEOUT) == []
    _beat(job_dir, run="run-a")  # an earlier try's file, found before this run's submission
    dog.submitted(0)
    assert dog.stalled([0], now=200.0) == []
    assert dog.stalled([0], now=200.0 + 10 * TIMEOUT) == []


def test_no_progress_for_the_timeout_is_a_stall_and_progress_resets_the_clock(tmp_path):
    job_dir = str(tmp_path)
    _beat(job_dir, run="run-a")
    dog = _watchdog(job_dir)
    dog.submitted(0)
    _beat(job_dir, run="run-b", progress_seq=1)  # this run started
    assert dog.stalled([0], now=100.0) == []  # first seen now
    assert dog.stalled([0], now=100.0 + TIMEOUT - 1) == []
    _beat(job_dir, run="run-b", progress_seq=2)  # an op ended: progress, seen at the next check
    assert dog.stalled([0], now=100.0 + TIMEOUT + 2) == []
    assert dog.stalled([0], now=100.0 + 2 * TIMEOUT + 1) == []
    assert dog.stalled([0], now=100.0 + 2 * TIMEOUT + 4) == [0]
    assert dog.stalled([0], now=100.0 + 2 * TIMEOUT + 5) == []  # checks are at least timeout/4 apart


def test_an_ended_partition_is_not_stalled(tmp_path):
    job_dir = str(tmp_path)
    dog = _watchdog(job_dir)
    dog.submitted(0)
    _beat(job_dir, ended="success")
    assert dog.stalled([0], now=100.0) == []
    assert dog.stalled([0], now=100.0 + 10 * TIMEOUT) == []


def test_an_off_policy_never_reads_a_heartbeat(tmp_path):
    dog = Watchdog(str(tmp_path), 0, StallPolicy(None))
    dog.submitted(0)
    _beat(str(tmp_path))
    assert dog.stalled([0], now=0.0) == [] and dog.stalled([0], now=1e9) == []
    assert dog.watches == {}


def test_a_stalled_partition_is_run_again_then_fails_naming_where_it_hung(tmp_path):
    job_dir = str(tmp_path)
    events = EventLog(job_dir, "job-w", defaults={"try_number": 1})
    dog = _watchdog(job_dir, retries=1, events=events)
    dog.submitted(0)
    _beat(job_dir)
    dog.stalled([0], now=0.0)
    assert dog.stalled([0], now=TIMEOUT + 1) == [0]
    assert dog.cancelled(0) is None  # first stall: run it again

    dog.submitted(0)
    _beat(job_dir, run="run-c", rows_done=20)
    dog.stalled([0], now=100.0)
    assert dog.stalled([0], now=100.0 + TIMEOUT + 1) == [0]
    error = dog.cancelled(0)
    assert isinstance(error, StalledPartitionError)
    text = str(error)
    assert text.startswith("partition 0 (rows 0-99) of segment 1 stalled: no progress for 10s at op 2")
    assert "(fix_unicode_mapper), 20 of 50 rows done" in text
    assert "from node-1 pid 4242" in text and "run 2 time(s)" in text and "logs/partition_00000.log" in text
    assert error.partition_id == 0 and error.heartbeat["run"] == "run-c"

    stalls = read_events(job_dir, "partition_stalled")
    assert [(e["partition_id"], e["stalls"], e["action"], e["op_name"]) for e in stalls] == [
        (0, 1, "retry", "fix_unicode_mapper"),
        (0, 2, "fail", "fix_unicode_mapper"),
    ]
    failed = read_events(job_dir, "partition_failed")
    assert [(e["partition_id"], e["reason"]) for e in failed] == [(0, "stalled")]
    log_text = open(partition_log_path(job_dir, 0)).read()
    assert log_text.count("STALLED: no progress for 10s at op 2") == 2


def test_zero_retries_fails_at_the_first_stall(tmp_path):
    dog = _watchdog(str(tmp_path), retries=0)
    assert isinstance(dog.cancelled(3), StalledPartitionError)


@pytest.mark.parametrize(
    ("beat", "expected"),
    [
        (None, "no progress for 5s"),
        ({"stage": "resume", "op_index": None}, "no progress for 5s while loading its checkpoint"),
        (
            {"stage": "key_phase", "op_index": 4, "op_name": "document_deduplicator", "rows_in": 7, "rows_done": 0},
            "no progress for 5s at op 4 (document_deduplicator) computing its keys for the global step, 0 of 7 rows done",
        ),
    ],
)
def test_describe_stall(beat, expected):
    assert describe_stall(beat, 5) == expected


def test_the_heartbeat_moves_its_sequence_only_with_the_work_and_marks_its_end(tmp_path):
    job_dir = str(tmp_path)
    hb = PartitionHeartbeat(job_dir, 7, segment=0, try_number=2, start_row=10, end_row=20, interval_s=0.2)
    with hb:
        first = read_heartbeat(job_dir, 7)
        assert first["progress_seq"] == 0 and first["stage"] == "starting" and first["ended"] is None
        assert (first["start_row"], first["end_row"], first["try_number"]) == (10, 20, 2)
        hb.progress("op", op_index=1, op_name="clean_email_mapper", rows_in=10, rows_done=0)
        deadline = time.monotonic() + 30
        while (read_heartbeat(job_dir, 7) or {}).get("progress_seq") != 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        moved = read_heartbeat(job_dir, 7)
        assert moved["progress_seq"] == 1 and moved["op_name"] == "clean_email_mapper"
        # With no progress, beats go on (the process is alive) and the sequence stays.
        while read_heartbeat(job_dir, 7)["beat_at"] == moved["beat_at"] and time.monotonic() < deadline:
            time.sleep(0.05)
        alive = read_heartbeat(job_dir, 7)
        assert alive["beat_at"] > moved["beat_at"] and alive["progress_seq"] == 1
    done = read_heartbeat(job_dir, 7)
    assert done["ended"] == "success" and done["run"] == first["run"]
    again = PartitionHeartbeat(job_dir, 7, segment=0, try_number=3, start_row=10, end_row=20)
    assert again._state["run"] != first["run"]  # each run has its own token


def test_a_failed_run_marks_its_heartbeat_failed(tmp_path):
    job_dir = str(tmp_path)
    with pytest.raises(ValueError):
        with PartitionHeartbeat(job_dir, 1, segment=0, try_number=1, start_row=0, end_row=5):
            raise ValueError("op broke")
    assert read_heartbeat(job_dir, 1)["ended"] == "failed"


def test_an_unreadable_heartbeat_reads_as_none(tmp_path):
    path = heartbeat_path(str(tmp_path), 2)
    os.makedirs(os.path.dirname(path))
    with open(path, "w") as fh:
        fh.write('{"torn')
    assert read_heartbeat(str(tmp_path), 2) is None
    assert read_heartbeat(str(tmp_path), 3) is None
