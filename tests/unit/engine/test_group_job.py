"""The Ray Job driver's checks and records (engine/runner/group_job.py, engine/jobdir/ray_jobs.py).

Real planned job directories, no Ray: a refused driver exits 2 and leaves the job directory as it
found it; the submission ids are deterministic; the record keeps each submission's transitions.
The driver's run on a real Ray Jobs cluster is tested in tests/integration/test_ray_jobs_mode.py.
"""

from __future__ import annotations

import os

import pytest

from airflow_provider_dj import __version__
from airflow_provider_dj.engine.config.recipe import load_recipe
from airflow_provider_dj.engine.job.setup import prepare_job
from airflow_provider_dj.engine.jobdir import ray_jobs
from airflow_provider_dj.engine.planning.execution_group import ExecutionGroup
from airflow_provider_dj.engine.runner import group_job
from airflow_provider_dj.engine.runner.group_job import EXIT_REFUSED, GroupJobSpec, run_group_job
from airflow_provider_dj.testing.sample_corpus import write_corpus


@pytest.fixture
def planned(tmp_path):
    data = write_corpus(str(tmp_path / "in.jsonl"), 40, seed=3)
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        f"dataset_path: {data}\nexport_path: {tmp_path / 'out.jsonl'}\nwork_dir: {tmp_path / 'work'}\n"
        "partition: {mode: manual, num_of_partitions: 2}\nprocess:\n  - words_num_filter: {min_num: 3}\n"
    )
    prepared = prepare_job(load_recipe(recipe), job_id="j1")
    return prepared.job_dir, prepared.groups


def _spec(job_dir: str, group: ExecutionGroup, **kw) -> GroupJobSpec:
    base = ray_jobs.base_submission_id(job_dir, "j1", 0, group.group_id)
    fields = dict(
        job_dir=job_dir,
        job_id="j1",
        segment_index=0,
        group=group,
        submission_id=base,
        attempt=0,
        provider_version=__version__,
        submitter_host="airflow-worker-1",
    )
    fields.update(kw)
    return GroupJobSpec(**fields)


def _tree(root: str) -> dict[str, int]:
    out = {}
    for dirpath, _, files in os.walk(root):
        for f in files:
            p = os.path.join(dirpath, f)
            out[os.path.relpath(p, root)] = os.stat(p).st_mtime_ns
    return out


def test_a_submitter_of_another_version_is_refused_naming_both_and_nothing_is_written(planned, capsys):
    job_dir, groups = planned
    before = _tree(job_dir)
    assert run_group_job(_spec(job_dir, groups[0], provider_version="0.0.9")) == EXIT_REFUSED
    err = capsys.readouterr().err
    assert err.startswith(group_job.REFUSED_PREFIX)
    assert "0.0.9" in err and __version__ in err and "airflow-provider-dj==0.0.9" in err
    assert _tree(job_dir) == before


def test_a_job_dir_the_cluster_does_not_see_is_refused_naming_the_path_and_the_host(planned, tmp_path, capsys):
    import socket

    job_dir, groups = planned
    missing = str(tmp_path / "elsewhere" / "j1")
    assert run_group_job(_spec(missing, groups[0])) == EXIT_REFUSED
    err = capsys.readouterr().err
    assert missing in err and socket.gethostname() in err and "same path" in err
    assert not os.path.exists(missing)


def test_a_job_dir_holding_another_job_is_refused(planned, capsys):
    job_dir, groups = planned
    before = _tree(job_dir)
    assert run_group_job(_spec(job_dir, groups[0], job_id="other")) == EXIT_REFUSED
    assert "holds job j1, not other" in capsys.readouterr().err
    assert _tree(job_dir) == before


def test_submission_ids_are_deterministic_per_job_dir_segment_group_and_attempt(tmp_path):
    a = ray_jobs.base_submission_id("/w/j.1", "j.1", 2, 3)
    assert a == ray_jobs.base_submission_id("/w/j.1/", "j.1", 2, 3)
    assert a.startswith("dj-j_1-") and a.endswith("-s2-g3")
    assert a != ray_jobs.base_submission_id("/other/j.1", "j.1", 2, 3)  # two work dirs, one cluster
    assert ray_jobs.submission_id(a, 0) == a and ray_jobs.submission_id(a, 2) == f"{a}-r2"
    assert ray_jobs.attempt_of(a, f"{a}-r2") == 2 and ray_jobs.attempt_of(a, a) == 0
    assert ray_jobs.attempt_of(a, "dj-else") is None


def test_the_record_keeps_each_submission_and_its_transitions(planned):
    job_dir, groups = planned
    g = groups[1]
    base = ray_jobs.base_submission_id(job_dir, "j1", 0, g.group_id)
    assert ray_jobs.read_record(job_dir, 0, g.group_id) is None
    ray_jobs.record_transition(job_dir, 0, g, base, "started", job_id="j1", attempt=0, identity={"host": "n1"})
    ray_jobs.record_transition(job_dir, 0, g, base, "failed", job_id="j1", attempt=0, error="boom")
    r1 = ray_jobs.submission_id(base, 1)
    ray_jobs.record_transition(job_dir, 0, g, r1, "started", job_id="j1", attempt=1)
    ray_jobs.record_transition(job_dir, 0, g, r1, "succeeded", job_id="j1", attempt=1, results=[{"partition_id": 1}])
    record = ray_jobs.read_record(job_dir, 0, g.group_id)
    assert record["partition_ids"] == list(g.partition_ids) and record["job_id"] == "j1"
    first = ray_jobs.find_submission(record, base)
    assert [t["state"] for t in first["transitions"]] == ["started", "failed"]
    assert first["host"] == "n1" and first["error"] == "boom"
    assert ray_jobs.latest_submission(record)["submission_id"] == r1
    assert ray_jobs.latest_submission(record)["results"] == [{"partition_id": 1}]
    assert os.path.exists(os.path.join(job_dir, "ray_jobs", f"seg0_group{g.group_id}.json"))


def test_the_spec_travels_as_one_quoted_shell_argument(planned):
    import shlex

    job_dir, groups = planned
    spec = _spec(job_dir, groups[0], event_defaults={"airflow_task_id": "partitions_seg0 'x'"})
    words = shlex.split(group_job.entrypoint(spec, python="/opt/py/bin/python"))
    assert words[:3] == ["/opt/py/bin/python", "-m", group_job.MODULE]
    assert GroupJobSpec.from_json(words[4]) == spec


def test_verify_group_reads_the_commit_markers_and_ignores_other_groups_failures(planned):
    from airflow_provider_dj.engine.execution.segment_runner import run_segment
    from airflow_provider_dj.engine.runner.stop import record_job_failure

    job_dir, groups = planned
    g0, g1 = groups
    assert group_job.verify_group(job_dir, 0, list(g0.partition_ids)) == (
        False,
        f"segment 0: 0/1 partitions of the group committed (not yet: {list(g0.partition_ids)})",
    )
    for pid in list(g0.partition_ids):
        run_segment(job_dir, 0, pid)
    record_job_failure(job_dir, "partitions_seg0 (map index 1)", RuntimeError("group 1 failed"))
    assert group_job.verify_group(job_dir, 0, list(g0.partition_ids)) == (
        True,
        "segment 0: 1/1 partitions of the group committed",
    )
    assert group_job.verify_group(job_dir, 0, list(g1.partition_ids))[0] is False
