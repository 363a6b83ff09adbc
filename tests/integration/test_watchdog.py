"""The watchdog on real runs: a partition that hangs is cancelled, run again from its checkpoint, and
after its retries fails naming where it hung; nothing it committed is lost.

Real parts: the engine's local executor (a pool of spawned processes, the ones the watchdog kills)
and a real local Ray (tasks cancelled with force).  The hang is the fault file's ``hang`` point: a
sleep standing for a model call that never answers, bounded far above the stall timeout so that a
watchdog that failed to act fails the test instead of hanging it.
"""

from __future__ import annotations

import os

import pytest

from tests.helpers_compare import assert_same_bytes
from tests.integration.crash_helpers import events_since, write_faults

pytestmark = pytest.mark.integration

# The timeout is far above what a partition that does not hang needs between two heartbeats: a fresh
# pool process that resumes and builds its op starts with seconds of imports, more on a loaded machine.
STALL = """
partition:
  mode: manual
  num_of_partitions: 2
  stall_timeout_s: 12
"""
HANG_BOUND_S = 300


def _hang(times: int) -> list[dict]:
    """Partition 1 hangs as op 2 (words_num_filter) starts, ``times`` times."""
    return [
        {"point": "op_start", "partition_id": 1, "op_index": 2, "kind": "hang", "seconds": HANG_BOUND_S, "times": times}
    ]


def _bytes(path: str) -> bytes:
    with open(path, "rb") as fh:
        return fh.read()


def _ops_completed(job_dir: str, partition_id: int) -> list[int]:
    return sorted(e["op_index"] for e in events_since(job_dir, 0, "op_complete", partition_id=partition_id))


@pytest.fixture(scope="module")
def clean_export(tmp_path_factory, corpus):
    """The export of the same recipe with no hang (inline, no watchdog)."""
    from airflow_provider_dj.engine import run_job
    from tests.integration.conftest import RECIPE

    base = tmp_path_factory.mktemp("watchdog_ref")
    recipe = base / "ref.yaml"
    recipe.write_text(
        RECIPE.format(
            name="ref", data=corpus, export=base / "ref.jsonl", work=base / "work", parts=2, strategy="every_op"
        )
    )
    result = run_job(str(recipe), job_id="ref", workers=1)
    return _bytes(result.export_path)


def _recipe(make_recipe, name: str) -> str:
    path = make_recipe(name, parts=2)
    text = open(path).read().replace("partition:\n  mode: manual\n  num_of_partitions: 2\n", STALL.lstrip("\n"))
    assert "stall_timeout_s: 12" in text
    with open(path, "w") as fh:
        fh.write(text)
    return path


@pytest.mark.parametrize("executor", ["local", "pool2", "ray"])
def test_a_partition_that_hangs_once_is_run_again_from_its_checkpoint(
    make_recipe, tmp_path, clean_export, executor, request
):
    from airflow_provider_dj.engine import run_job

    if executor == "ray":
        request.getfixturevalue("ray_cluster")  # this worker's local Ray, which run_job joins

    recipe = _recipe(make_recipe, f"hang_once_{executor}")
    job_dir = str(tmp_path / "work" / "once")
    write_faults(job_dir, _hang(times=1))
    # local: one pool process; pool2: two, whose pool is killed for the hung partition and started again.
    kwargs = {"local": {"workers": 1}, "pool2": {"workers": 2}, "ray": {"executor": "ray"}}[executor]
    result = run_job(recipe, job_id="once", **kwargs)

    assert_same_bytes(_bytes(result.export_path), clean_export)
    stalls = events_since(job_dir, 0, "partition_stalled")
    assert [(e["partition_id"], e["op_index"], e["op_name"], e["action"]) for e in stalls] == [
        (1, 2, "words_num_filter", "retry")
    ]
    # Ops 0 and 1 of the hung partition committed before the hang and were not run again.
    assert _ops_completed(job_dir, 1) == [0, 1, 2, 3, 4]
    assert _ops_completed(job_dir, 0) == [0, 1, 2, 3, 4]


def test_a_partition_that_always_hangs_fails_naming_it_and_resume_finishes(make_recipe, tmp_path, clean_export):
    from airflow_provider_dj.engine import run_job
    from airflow_provider_dj.engine.execution.ray_dispatch import PartitionFailedError
    from airflow_provider_dj.engine.jobdir.layout import FAULT_FILE

    recipe = _recipe(make_recipe, "hang_always")
    job_dir = str(tmp_path / "work" / "always")
    write_faults(job_dir, _hang(times=2))  # the first run and its one retry

    with pytest.raises(PartitionFailedError) as caught:
        run_job(recipe, job_id="always", workers=1)
    text = str(caught.value)
    assert "partition 1 (rows 200-399) of segment 0 stalled: no progress for 12s at op 2 (words_num_filter)" in text
    assert "run 2 time(s)" in text and "partition.stall_timeout_s" in text
    stalls = events_since(job_dir, 0, "partition_stalled")
    assert [(e["partition_id"], e["stalls"], e["action"]) for e in stalls] == [(1, 1, "retry"), (1, 2, "fail")]
    assert _ops_completed(job_dir, 1) == [0, 1]  # committed before the hang, and kept
    assert _ops_completed(job_dir, 0) == [0, 1, 2, 3]  # segment 0 only: the job stopped before the global step
    assert os.path.isdir(os.path.join(job_dir, "checkpoints"))

    os.remove(os.path.join(job_dir, FAULT_FILE))  # the hang is fixed: resume the same job
    result = run_job(recipe, resume="always", workers=1)
    assert_same_bytes(_bytes(result.export_path), clean_export)
    assert _ops_completed(job_dir, 1) == [0, 1, 2, 3, 4]  # ops 0 and 1 were not run a second time
