"""CheckpointSensor's check (engine.job.watch) and its trigger, over real job directories.

Jobs are prepared and run in-process with the real engine; the trigger is
run with asyncio directly (its run() polls in a thread, as in the triggerer).
Failures are the real event records the engine writes (EventLog.emit).
"""

from __future__ import annotations

import asyncio
import os
import threading

import pytest

from airflow_provider_dj.engine.config.recipe import load_recipe
from airflow_provider_dj.engine.execution.global_ops import resolve_global_op
from airflow_provider_dj.engine.execution.segment_runner import run_segment
from airflow_provider_dj.engine.job.setup import prepare_job
from airflow_provider_dj.engine.job.watch import JobFailedError, WaitTargetError, check
from airflow_provider_dj.engine.jobdir.events import EventLog
from airflow_provider_dj.testing.sample_corpus import write_corpus

PROCESS = """process:
  - whitespace_normalization_mapper:
  - words_num_filter: {min_num: 5}
  - document_deduplicator:
  - text_length_filter: {min_len: 10}
"""


@pytest.fixture
def job(tmp_path):
    data = write_corpus(str(tmp_path / "in.jsonl"), 120, seed=3)
    (tmp_path / "r.yaml").write_text(
        f"dataset_path: {data}\nexport_path: {tmp_path}/o.jsonl\n"
        f"partition: {{mode: manual, num_of_partitions: 3}}\n"
        f"checkpoint: {{strategy: every_n_ops, n_ops: 5}}\n{PROCESS}"
    )
    return prepare_job(load_recipe(str(tmp_path / "r.yaml")), job_id="w").job_dir


def test_after_op_by_name_and_index_waits_for_listed_partitions(job):
    st = check(job, after_op="whitespace_normalization_mapper")
    assert not st.done and st.missing == [0, 1, 2]
    run_segment(job, 0, 1)
    # op 0 is not a checkpoint point (every 5 ops); the segment's last state (op 1) stands for it
    assert check(job, after_op=0, partitions=[1]).done
    st = check(job, after_op="words_num_filter")
    assert (st.done, st.committed, st.missing) == (False, [1], [0, 2])
    run_segment(job, 0, 0)
    run_segment(job, 0, 2)
    assert check(job, after_op=1).done
    assert check(job, segment_index=0).done  # the barrier: outputs + dedup keys
    assert not check(job, after_op="document_deduplicator").done  # the global step has not run
    resolve_global_op(job, 2)
    assert check(job, after_op="document_deduplicator").done
    assert not check(job, after_op="text_length_filter").done
    assert not check(job, wait_for="export").done


def test_bad_targets_are_named(job):
    with pytest.raises(WaitTargetError, match="Did you mean 'words_num_filter'"):
        check(job, after_op="words_num_filtr")
    with pytest.raises(WaitTargetError, match="out of range"):
        check(job, after_op=9)
    with pytest.raises(WaitTargetError, match=r"partitions \[7\] do not exist"):
        check(job, after_op=0, partitions=[7])


def test_failed_partition_fails_fast_until_it_restarts(job):
    ev = EventLog(job, "w")
    ev.emit("partition_failed", partition_id=2, segment=0, error_message="op 1 (words_num_filter): ValueError: bad")
    with pytest.raises(JobFailedError, match=r"partition 2: op 1 \(words_num_filter\): ValueError: bad") as e:
        check(job, after_op=1)
    assert e.value.partitions == [2]
    assert not check(job, after_op=1, partitions=[0]).done  # a sensor on other partitions keeps waiting
    ev.emit("partition_start", partition_id=2, segment=0)  # a retry picked it up
    assert not check(job, after_op=1).done
    ev.emit("job_failed", error_message="export: disk full")
    with pytest.raises(JobFailedError, match="disk full"):
        check(job, wait_for="export")


def _run_trigger(trigger):
    async def first():
        async for event in trigger.run():
            return event.payload

    return asyncio.run(first())


def test_trigger_yields_when_checkpoints_appear(job):
    from airflow_provider_dj.triggers.checkpoint import CheckpointTrigger

    trigger = CheckpointTrigger(job_dir=job, after_op="words_num_filter", partitions=[0, 2], poke_interval=0.05)
    classpath, kwargs = trigger.serialize()
    from airflow.sdk._shared.module_loading import import_string

    rebuilt = import_string(classpath)(**kwargs)  # what the triggerer does
    assert rebuilt.serialize() == (classpath, kwargs)
    seen = threading.Event()
    orig = rebuilt._check

    def recording_check():
        r = orig()
        seen.set()
        return r

    rebuilt._check = recording_check

    def produce():
        seen.wait(30)  # only after the trigger has looked once and found nothing
        run_segment(job, 0, 0)
        run_segment(job, 0, 2)

    t = threading.Thread(target=produce)
    t.start()
    payload = _run_trigger(rebuilt)
    t.join()
    assert payload["status"] == "success" and payload["committed"] == [0, 2]
    assert payload["polls"] >= 2


def test_trigger_reports_failure(job):
    from airflow_provider_dj.triggers.checkpoint import CheckpointTrigger

    EventLog(job, "w").emit("partition_failed", partition_id=1, segment=0, error_message="boom")
    payload = _run_trigger(CheckpointTrigger(job_dir=job, after_op=1, poke_interval=0.05))
    assert payload["status"] == "failed" and payload["partitions"] == [1] and "partition 1: boom" in payload["message"]


def test_sensor_arguments_are_checked():
    from airflow_provider_dj.sensors.checkpoint import CheckpointSensor

    with pytest.raises(ValueError, match="exactly one of"):
        CheckpointSensor(task_id="s", job_dir="/x", after_op=1, wait_for="export")
    with pytest.raises(ValueError, match="job_dir, or both work_dir and job_id"):
        CheckpointSensor(task_id="s", work_dir="/x", wait_for="export")
    with pytest.raises(ValueError, match="all or nothing"):
        CheckpointSensor(task_id="s", job_dir="/x", wait_for="export", partitions=[1])
    s = CheckpointSensor(task_id="s", work_dir="/w", job_id="j1", after_op="x")
    assert s.resolved_job_dir == "/w/j1"


def test_scheduled_job_id_matches_the_recipe_dags_scheduled_run():
    """The example training DAG names tonight's job with this macro; it must equal the id
    validate derives for a scheduled run (Airflow's own run id for it)."""
    import pendulum
    from airflow.models.dagrun import DagRun
    from airflow.utils.types import DagRunType

    from airflow_provider_dj.engine.jobdir.identity import job_id_for_run
    from airflow_provider_dj.sensors.checkpoint import scheduled_job_id

    when = pendulum.datetime(2026, 11, 29, tz="UTC")
    run_id = DagRun.generate_run_id(run_type=DagRunType.SCHEDULED, logical_date=when, run_after=when)
    assert scheduled_job_id("dj_demo", when) == job_id_for_run("dj_demo", run_id, when)


def test_the_sensor_defers_by_default_where_airflow_says_operators_should():
    """``deferrable`` defaults to Airflow's ``[operators] default_deferrable``, as Airflow's own sensors
    do: off unless the deployment turns it on (read when the module is imported, hence a new process)."""
    import subprocess
    import sys

    code = (
        "from airflow_provider_dj.sensors.checkpoint import CheckpointSensor;"
        "print(CheckpointSensor(task_id='t', job_dir='/tmp/j', wait_for='export').deferrable)"
    )
    seen = {}
    for value in ("True", "False"):
        env = {**os.environ, "AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE": value}
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        seen[value] = out.stdout.strip().splitlines()[-1]
    assert seen == {"True": "True", "False": "False"}
