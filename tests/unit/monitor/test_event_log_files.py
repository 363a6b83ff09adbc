"""The event log: one file per writer, merged by time, torn lines never read."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from airflow_provider_dj.engine.jobdir import events as events_mod
from airflow_provider_dj.engine.jobdir.events import EventLog, iter_event_files, parse_event_lines, read_events


def test_writers_get_their_own_files_and_readers_merge_them_by_time(tmp_path, monkeypatch):
    clock = iter([5.0, 1.0, 3.0, 2.0, 4.0, 4.0, 4.0])
    monkeypatch.setattr(events_mod.time, "time", lambda: next(clock))
    a = EventLog(str(tmp_path), "job", writer="host-a_1")
    b = EventLog(str(tmp_path), "job", writer="host-b_2")
    c = EventLog(str(tmp_path), "job", writer="host-c_3")
    a.emit("op_start", partition_id=0, op_index=4)  # t=5
    b.emit("op_start", partition_id=1, op_index=0)  # t=1
    c.emit("op_start", partition_id=2, op_index=2)  # t=3
    b.emit("op_start", partition_id=1, op_index=1)  # t=2
    a.emit("op_start", partition_id=0, op_index=3)  # t=4
    c.emit("op_complete", partition_id=2, op_index=0, input_rows=10, output_rows=9)  # t=4, same tick
    c.emit("op_complete", partition_id=2, op_index=1, input_rows=9, output_rows=9)  # t=4, same tick
    assert sorted(os.path.basename(p) for p in iter_event_files(str(tmp_path))) == [
        "events_host-a_1.jsonl",
        "events_host-b_2.jsonl",
        "events_host-c_3.jsonl",
    ]
    merged = read_events(str(tmp_path))
    assert [e["timestamp"] for e in merged] == [1.0, 2.0, 3.0, 4.0, 4.0, 4.0, 5.0]
    # same clock tick: writer name then per-writer sequence keeps each writer's order
    assert [(e["writer"], e["op_index"]) for e in merged if e["timestamp"] == 4.0] == [
        ("host-a_1", 3),
        ("host-c_3", 0),
        ("host-c_3", 1),
    ]
    assert all(e["job_id"] == "job" and e["time_utc"].endswith("+00:00") for e in merged)
    assert [e["op_index"] for e in read_events(str(tmp_path), "op_start", since=2.0)] == [1, 2, 3, 4]


def test_a_torn_last_line_is_skipped_even_when_its_prefix_parses(tmp_path):
    log = EventLog(str(tmp_path), "job", writer="w")
    log.emit("partition_start", partition_id=0)
    log.emit("partition_complete", partition_id=0, output_rows=3)
    with open(log.path, "ab") as fh:
        fh.write(b'{"event_type": "op_start", "partition_id": 0}')  # whole JSON, but no newline: torn
    assert [e["event_type"] for e in read_events(str(tmp_path))] == ["partition_start", "partition_complete"]
    with open(log.path, "ab") as fh:
        fh.write(b'\n{"event_type": "op_sta')  # now a real torn fragment after a whole line
    assert len(read_events(str(tmp_path))) == 3
    assert parse_event_lines(b'garbage\n{"no_type": 1}\n[1,2]\n') == []


def test_a_writer_reusing_a_torn_file_does_not_glue_its_event_to_the_fragment(tmp_path):
    first = EventLog(str(tmp_path), "job", writer="host_77")
    first.emit("op_start", partition_id=1, op_index=0)
    with open(first.path, "ab") as fh:
        fh.write(b'{"event_type": "op_complete", "partit')  # killed mid-write
    again = EventLog(str(tmp_path), "job", writer="host_77")  # same host, recycled pid
    again.emit("op_start", partition_id=1, op_index=0, try_number=2)
    evs = read_events(str(tmp_path))
    assert [(e["event_type"], e.get("try_number")) for e in evs] == [("op_start", None), ("op_start", 2)]


WRITER = """
import sys
from airflow_provider_dj.engine.jobdir.events import EventLog
log = EventLog(sys.argv[1], "job", writer="victim")
pad = "x" * 200_000
i = 0
while True:
    log.emit("op_complete", partition_id=i % 7, op_index=i, input_rows=i, output_rows=i, note=pad)
    i += 1
"""


def test_a_writer_killed_mid_loop_leaves_only_whole_lines(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path)], cwd=os.getcwd())
    path = tmp_path / "events_victim.jsonl"
    try:
        deadline = time.monotonic() + 60
        while (not path.exists() or path.stat().st_size < 5_000_000) and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    data = path.read_bytes()
    pieces = data.split(b"\n")
    whole, tail = pieces[:-1], pieces[-1]
    assert len(whole) >= 20
    for line in whole:  # every newline-terminated line is one complete event
        json.loads(line)
    if tail:  # a torn last write is possible and must not be read
        try:
            json.loads(tail)
            torn = False
        except ValueError:
            torn = True
        assert torn or not data.endswith(b"\n")
    evs = read_events(str(tmp_path))
    assert len(evs) == len(whole)
    assert [e["op_index"] for e in evs] == list(range(len(whole)))  # nothing lost before the kill, in order
