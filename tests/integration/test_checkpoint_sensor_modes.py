"""CheckpointSensor in poke, reschedule and deferrable mode, each in a real dag.test() run.

Airflow 3's dag.test() runs a deferred task's trigger inline and honours
reschedule mode (the task goes up_for_reschedule and is picked up again),
so all three modes are exercised end to end.  The job's work is done by the
real engine in a background thread that starts only after the sensor's
first (negative) poke, so each test proves the sensor waited.  Fail-fast:
the thread writes a real partition_failed event instead; the sensor must
fail at once, on its first try, naming the partition, though it has
retries=2 and a 300 s timeout.
"""

from __future__ import annotations

import json
import os
import threading

import pytest

from airflow_provider_dj.engine.config.recipe import load_recipe
from airflow_provider_dj.engine.execution.segment_runner import run_segment
from airflow_provider_dj.engine.job.setup import prepare_job
from airflow_provider_dj.engine.jobdir.events import EventLog
from airflow_provider_dj.engine.runner.local import run_prepared_job
from airflow_provider_dj.testing.sample_corpus import write_corpus
from tests.integration import sensor_wait_helpers as H

pytestmark = pytest.mark.integration

MODES = [("poke", False), ("reschedule", False), ("poke", True)]
IDS = ["poke", "reschedule", "deferrable"]


@pytest.fixture
def planned(tmp_path):
    """The planned job (validate done, nothing run)."""
    data = write_corpus(str(tmp_path / "in.jsonl"), 90, seed=5)
    (tmp_path / "r.yaml").write_text(
        f"dataset_path: {data}\nexport_path: {tmp_path}/corpus.jsonl\npartition: {{mode: manual, num_of_partitions: 3}}\n"
        "process:\n  - whitespace_normalization_mapper:\n  - document_deduplicator:\n  - words_num_filter: {min_num: 3}\n"
    )
    return prepare_job(load_recipe(str(tmp_path / "r.yaml")), job_id="corpus_job")


@pytest.fixture
def job(planned):
    """The planned job's directory."""
    return planned.job_dir


@pytest.fixture
def sensor_dag(airflow_home, tmp_path):
    folder = os.environ["AIRFLOW__CORE__DAGS_FOLDER"]
    stub = os.path.join(folder, "dj_sensor_modes_test.py")

    def make(dag_id, job_dir, mode, deferrable, target):
        cfg = tmp_path / "sensor_cfg.json"
        cfg.write_text(
            json.dumps(
                {
                    "dag_id": dag_id,
                    "job_dir": job_dir,
                    "mode": mode,
                    "deferrable": deferrable,
                    "poke_interval": 1 if mode == "reschedule" else 0.2,
                    "target": target,
                }
            )
        )
        with open(stub, "w") as fh:
            fh.write(H.DAG_STUB.format(cfg_path=str(cfg)))
        from airflow.dag_processing.dagbag import DagBag

        bag = DagBag(dag_folder=stub)
        assert not bag.import_errors, bag.import_errors
        return bag.get_dag(dag_id)

    H.reset()
    yield make
    os.remove(stub) if os.path.exists(stub) else None


def _run_after_first_poke(fn):
    def body():
        if H.FIRST_POKE.wait(120):
            fn()

    t = threading.Thread(target=body)
    t.start()
    return t


def _ti(dr, task_id="wait"):
    from airflow.utils.session import create_session

    with create_session() as session:
        ti = dr.get_task_instance(task_id, session=session)
        return str(ti.state).split(".")[-1].lower(), ti.try_number


@pytest.mark.parametrize("mode,deferrable", MODES, ids=IDS)
def test_waits_for_export_then_succeeds(sensor_dag, planned, job, mode, deferrable):
    dag = sensor_dag(
        f"dj_wait_export_{IDS[MODES.index((mode, deferrable))]}", job, mode, deferrable, {"wait_for": "export"}
    )
    t = _run_after_first_poke(lambda: run_prepared_job(planned))
    dr = dag.test()
    t.join()
    assert str(dr.state).endswith("success")
    assert H.POKES[0] is False  # it looked before the job had exported, and waited
    if deferrable:
        assert H.POKES == [False]  # the rest of the wait happened in the trigger
    else:
        assert H.POKES[-1] is True and len(H.POKES) >= 2
    assert json.load(open(os.path.join(job, "job_summary.json")))["status"] == "completed"
    assert _ti(dr) == ("success", 1)


@pytest.mark.parametrize("mode,deferrable", MODES, ids=IDS)
def test_waits_for_op_on_some_partitions(sensor_dag, job, mode, deferrable):
    dag = sensor_dag(
        f"dj_wait_op_{IDS[MODES.index((mode, deferrable))]}",
        job,
        mode,
        deferrable,
        {"after_op": "whitespace_normalization_mapper", "partitions": [0, 2]},
    )
    t = _run_after_first_poke(lambda: (run_segment(job, 0, 0), run_segment(job, 0, 2)))
    dr = dag.test()
    t.join()
    assert str(dr.state).endswith("success")
    assert H.POKES[0] is False
    assert not os.path.exists(
        os.path.join(
            job, "checkpoints", "checkpoint_op_000_whitespace_normalization_mapper", "partition_00001.commit.json"
        )
    )  # partition 1 was never needed


@pytest.mark.parametrize("mode,deferrable", MODES, ids=IDS)
def test_failed_partition_fails_the_sensor_at_once(sensor_dag, job, mode, deferrable, capfd):
    dag = sensor_dag(
        f"dj_wait_fail_{IDS[MODES.index((mode, deferrable))]}", job, mode, deferrable, {"wait_for": "export"}
    )

    def fail():
        EventLog(job, "corpus_job").emit(
            "partition_failed",
            partition_id=1,
            segment=0,
            error_message="op 0 (whitespace_normalization_mapper): OSError: disk gone",
        )

    t = _run_after_first_poke(fail)
    dr = dag.test()
    t.join()
    assert str(dr.state).endswith("failed")
    state, try_number = _ti(dr)
    assert (state, try_number) == ("failed", 1)  # AirflowFailException: no retries, no timeout wait
    if not deferrable:
        assert H.POKES[-1] == "AirflowFailException"
    out, err = capfd.readouterr()  # the task log (dag.test writes it to the console)
    assert (
        "AirflowFailException: job corpus_job failed (partition 1: op 0 (whitespace_normalization_mapper): "
        "OSError: disk gone)" in out + err
    )
