"""``run_job(executor="auto")`` (what ``dj-airflow run`` uses): Ray only where it pays.

Real runs through the engine in this process: a job whose partitions to compute hold at most
``[dj] local_work_max_rows`` rows runs on the local pool and never asks for Ray (the Ray client given
to it records any call); past the limit it asks for Ray; a night that reuses most of the last night
counts only the partitions it computes.  Every way exports the bytes the Ray run exports."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

from airflow_provider_dj.engine import run_job
from airflow_provider_dj.engine.runner.executor_choice import ray_needed_before_planning
from airflow_provider_dj.testing.sample_corpus import write_corpus, write_growth_file
from tests.helpers_compare import assert_same_bytes

pytestmark = pytest.mark.integration


class _RayClient:
    """The ray module, handed over only when asked for; counts the asks."""

    def __init__(self, ray) -> None:
        self.ray, self.calls = ray, 0

    def __call__(self):
        self.calls += 1
        return self.ray


def _run(recipe, job_id, tmp_path, executor, client, lines, **overrides):
    export = tmp_path / f"{job_id}.jsonl"
    run_job(
        recipe,
        job_id=job_id,
        executor=executor,
        workers=2,
        ray_client=client,
        say=lines.append,
        overrides={"export_path": str(export), **overrides},
    )
    return export.read_bytes()


def test_small_work_stays_off_ray_and_large_work_asks_for_it(make_recipe, ray_cluster, monkeypatch, tmp_path):
    recipe = make_recipe("auto_choice", parts=4)
    ray_ref = _run(recipe, "ray_ref", tmp_path, "ray", _RayClient(ray_cluster), [])

    monkeypatch.setenv("DJ_LOCAL_WORK_MAX_ROWS", "100000")
    client, lines = _RayClient(ray_cluster), []
    assert_same_bytes(_run(recipe, "small", tmp_path, "auto", client, lines), ray_ref, "auto (local) vs Ray")
    assert client.calls == 0, "a small job asked for Ray"
    assert "executor: 4 of 4 partitions to compute (400 rows): a local pool of 2 processes, no Ray" in "\n".join(lines)

    monkeypatch.setenv("DJ_LOCAL_WORK_MAX_ROWS", "100")
    client, lines = _RayClient(ray_cluster), []
    assert_same_bytes(_run(recipe, "large", tmp_path, "auto", client, lines), ray_ref, "auto (Ray) vs Ray")
    assert client.calls >= 1
    assert "4 of 4 partitions to compute (400 rows): Ray (more than local_work_max_rows = 100)" in "\n".join(lines)

    monkeypatch.setenv("DJ_LOCAL_WORK_MAX_ROWS", "0")  # 0: always Ray, decided before planning
    client, lines = _RayClient(ray_cluster), []
    _run(recipe, "zero", tmp_path, "auto", client, lines)
    assert client.calls >= 1 and "executor: Ray, whatever the rows: local_work_max_rows is 0" in lines


NIGHTLY = """\
project_name: auto_nightly
dataset_path: {data}
export_path: {export}
work_dir: {work}
partition: {{mode: manual, size: 100, align: file}}
intermediate_storage: {{reuse_across_jobs: true}}
process:
  - clean_email_mapper:
  - words_num_filter: {{min_num: 5}}
  - document_deduplicator: {{lowercase: true}}
"""


def test_a_night_that_reuses_most_partitions_counts_only_what_it_computes(ray_cluster, monkeypatch, tmp_path):
    monkeypatch.setenv("DJ_LOCAL_WORK_MAX_ROWS", "150")
    data = tmp_path / "in"
    for i in range(2):
        write_corpus(str(data / f"day1_{i}.jsonl"), 150, seed=i)
    texts = [line for i in range(2) for line in open(data / f"day1_{i}.jsonl")]
    recipe = tmp_path / "nightly.yaml"
    recipe.write_text(NIGHTLY.format(data=data, export=tmp_path / "unused.jsonl", work=tmp_path / "work"))
    client, lines = _RayClient(ray_cluster), []
    _run(str(recipe), "night1", tmp_path, "auto", client, lines)
    assert client.calls >= 1 and "4 of 4 partitions to compute (300 rows): Ray" in "\n".join(lines)

    import json

    write_growth_file(str(data / "day2_0.jsonl"), [json.loads(t)["text"] for t in texts], 20, seed=7)
    client, lines = _RayClient(ray_cluster), []
    night2 = _run(str(recipe), "night2", tmp_path, "auto", client, lines)
    assert "1 of 5 partitions to compute (20 rows): in this process, no Ray" in "\n".join(lines), lines
    assert client.calls == 0
    scratch = _run(str(recipe), "scratch", tmp_path, "ray", _RayClient(ray_cluster), [], work_dir=str(tmp_path / "s"))
    assert_same_bytes(night2, scratch, "night 2 (local, reusing night 1) vs a from-scratch Ray run")


def test_recipes_that_need_ray_are_known_before_planning(monkeypatch):
    monkeypatch.setenv("DJ_LOCAL_WORK_MAX_ROWS", "100000")
    assert ray_needed_before_planning(SimpleNamespace(process=[SimpleNamespace(name="clean_email_mapper")])) is None
    embed = SimpleNamespace(process=[SimpleNamespace(name="text_embedding_mapper")])
    assert ray_needed_before_planning(embed) == "text_embedding_mapper uses a GPU"
    lid = SimpleNamespace(process=[SimpleNamespace(name="language_id_score_filter")])
    assert ray_needed_before_planning(lid) == "language_id_score_filter keeps a model per Ray actor"
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:6379")
    assert "RAY_ADDRESS" in ray_needed_before_planning(SimpleNamespace(process=[]))


def test_ray_starts_before_planning_only_when_a_new_jobs_input_is_far_past_the_limit(tmp_path, monkeypatch):
    from airflow_provider_dj.engine.config.recipe import load_recipe
    from airflow_provider_dj.engine.jobdir.layout import reuse_index_dir
    from airflow_provider_dj.engine.runner.executor_choice import ray_sure_before_planning

    data = write_corpus(str(tmp_path / "in" / "a.jsonl"), 2000, seed=5)
    path = tmp_path / "r.yaml"
    path.write_text(NIGHTLY.format(data=data, export=tmp_path / "o.jsonl", work=tmp_path / "work"))
    monkeypatch.setenv("DJ_LOCAL_WORK_MAX_ROWS", "100")
    assert ray_sure_before_planning(load_recipe(str(path)))  # about 2,000 rows, 20 times the limit, no index yet
    assert not ray_sure_before_planning(load_recipe(str(path), {"resume": "job1"}))  # a resume may have little left
    (tmp_path / "work").mkdir()
    os.makedirs(reuse_index_dir(str(tmp_path / "work")))
    assert not ray_sure_before_planning(load_recipe(str(path)))  # an earlier job may lend most of it
    monkeypatch.setenv("DJ_LOCAL_WORK_MAX_ROWS", "1000")
    assert not ray_sure_before_planning(load_recipe(str(path), {"work_dir": str(tmp_path / "w2")}))  # 2x: planning


ONE_SEGMENT = """\
project_name: auto_resume
dataset_path: {data}
export_path: {export}
work_dir: {work}
partition: {{mode: manual, num_of_partitions: 4}}
process:
  - clean_email_mapper:
  - words_num_filter: {{min_num: 5}}
"""


def test_a_resume_counts_only_the_partitions_not_committed(corpus, ray_cluster, monkeypatch, tmp_path):
    """A partition counts as done when every segment of it committed; one segment here (no global op), so
    the three partitions that committed before partition 1 failed are not computed again."""
    from tests.integration.crash_helpers import write_faults

    recipe = str(tmp_path / "r.yaml")
    (tmp_path / "r.yaml").write_text(
        ONE_SEGMENT.format(data=corpus, export=tmp_path / "x.jsonl", work=tmp_path / "work")
    )
    job_dir = tmp_path / "work" / "resumed"
    write_faults(str(job_dir), [{"point": "op_start", "partition_id": 1, "op_index": 1, "times": 1, "kind": "raise"}])
    with pytest.raises(Exception):  # noqa: B017 - partition 1 fails on purpose; the resume below finishes it
        _run(recipe, "resumed", tmp_path, "local", None, [])
    monkeypatch.setenv("DJ_LOCAL_WORK_MAX_ROWS", "100000")
    client, lines = _RayClient(ray_cluster), []
    export = tmp_path / "resumed.jsonl"
    run_job(
        recipe,
        resume="resumed",
        executor="auto",
        workers=2,
        ray_client=client,
        say=lines.append,
        overrides={"export_path": str(export)},
    )
    assert "executor: 1 of 4 partitions to compute (100 rows): in this process, no Ray" in "\n".join(lines), lines
    assert client.calls == 0
    ref = _run(recipe, "resume_ref", tmp_path, "ray", _RayClient(ray_cluster), [])
    assert_same_bytes(export.read_bytes(), ref, "the resumed auto run vs a clean Ray run")
