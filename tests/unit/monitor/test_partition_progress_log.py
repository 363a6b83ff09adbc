"""Human-readable logs in {job}/logs/: per partition, op by op, with rates; throttled batch progress."""

from __future__ import annotations

import os
import re

from airflow_provider_dj.engine.execution.segment_runner import run_segment
from airflow_provider_dj.engine.jobdir.progress_log import PartitionProgressLog, partition_log_path, tail_lines
from tests.unit.monitor.conftest import read_lines, run_all


def test_segment_runner_writes_one_log_per_partition_across_segments(new_job):
    job = new_job("logged")
    run_all(job)  # the local executor: one try, so no try tag in the lines
    assert sorted(os.listdir(os.path.join(job["dir"], "logs"))) == [
        "job.log",
        "partition_00000.log",
        "partition_00001.log",
        "partition_00002.log",
    ]
    lines = read_lines(partition_log_path(job["dir"], 1))
    bodies = [re.sub(r"^\S+Z ", "", ln) for ln in lines]
    assert bodies[0] == "[p1 seg0] partition start: rows 40-79 (40 rows), 2 ops to run"
    assert bodies[1] == "[p1 seg0] op 0 whitespace_normalization_mapper start (1/2 of this segment): 40 rows in"
    assert re.fullmatch(
        r"\[p1 seg0\] op 0 whitespace_normalization_mapper done \(1/2\): 40 -> 40 rows in "
        r"\d+\.\d{3}s \([\d,]+ rows/s\), ETA \d+\.\d+s for 1 more ops",
        bodies[2],
    )
    assert any(b.startswith("[p1 seg1] op 2 document_deduplicator done (1/1): ") for b in bodies)
    assert bodies[-1].startswith("[p1 seg1] partition segment done: ")
    assert all(re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z ", ln) for ln in lines)


def test_a_resumed_partition_says_where_it_resumed(new_job):
    job = new_job("resumed_log", faults=[{"partition_id": 0, "after_op": 0, "times": 1}])
    try:
        run_segment(job["dir"], 0, 0, try_number=1)
    except Exception:  # noqa: BLE001 - the injected crash
        pass
    run_segment(job["dir"], 0, 0, try_number=2)
    bodies = [re.sub(r"^\S+Z ", "", ln) for ln in read_lines(partition_log_path(job["dir"], 0))]
    assert "[p0 seg0 try2] resuming from the checkpoint after op 0 (whitespace_normalization_mapper): 40 rows" in bodies
    assert not any(b.startswith("[p0 seg0 try2] op 0 ") for b in bodies)  # op 0 did not run again


def test_batch_progress_is_throttled_and_reports_rate_and_eta(tmp_path):
    plog = PartitionProgressLog(str(tmp_path), 7, segment=0, try_number=1, interval_s=3600)
    plog.op_start(2, "slow_llm_mapper", 1000, 1, 1)
    assert plog.batch(2, "slow_llm_mapper", 100, 1000) == ""  # within the interval: no line
    line = plog.batch(2, "slow_llm_mapper", 250, 1000, force=True)
    assert re.search(
        r"\[p7 seg0 try1\] op 2 slow_llm_mapper: 250/1,000 rows \(25%\), [\d,]+ rows/s, ETA \d+\.\ds$", line.strip()
    )
    every = PartitionProgressLog(str(tmp_path), 7, segment=0, interval_s=0)
    every.op_start(2, "slow_llm_mapper", 1000, 1, 1)
    assert every.batch(2, "slow_llm_mapper", 500, 1000)
    assert len(tail_lines(partition_log_path(str(tmp_path), 7), 10)) == 4
    assert "op 2 slow_llm_mapper: 500/1,000 rows (50%)" in tail_lines(partition_log_path(str(tmp_path), 7), 1)[0]
