"""gpu_preflight as the first task of a real DAG run (dag.test, local Ray), on the CPU path.

No GPU exists here, so the probe runs as a Ray task holding one CPU and
reports CPU-path memory; text_embedding_mapper is the real op (CPU torch).
Its job reads a short corpus of its own (96 rows of a dozen words): CPU
torch spends about 0.2 s on one of the shared corpus's long rows, and what is
checked here (the probe, the DAG around it, one vector per row) does not
grow with the text.
"""

from __future__ import annotations

import glob
import json
import os
from types import SimpleNamespace

import pytest

from airflow_provider_dj.engine.gpu.report import load_probe_report
from airflow_provider_dj.testing.sample_corpus import generate_rows

EMBED = """
  - text_embedding_mapper:
      batch_size: 64
      device: cpu
"""


def _recipe(tmp_path, corpus, name, process, partition_extra=""):
    path = tmp_path / f"{name}.yaml"
    path.write_text(f"""\
project_name: {name}
dataset_path: {corpus}
export_path: {tmp_path / (name + "_out.jsonl")}
work_dir: {tmp_path / "work"}
partition:
  mode: manual
  num_of_partitions: 2
{partition_extra}
process:
  - whitespace_normalization_mapper:
{process}
""")
    return str(path)


@pytest.fixture
def short_corpus(tmp_path) -> str:
    """96 rows (more than the probe's 64-row sample) cut to their first twelve words."""
    path = tmp_path / "short_corpus.jsonl"
    with open(path, "w", encoding="utf-8") as fh:
        for row in generate_rows(96, 11):
            row["text"] = " ".join(row["text"].split()[:12])
            fh.write(json.dumps(row) + "\n")
    return str(path)


def test_preflight_probes_text_embedding_then_the_job_runs(tmp_path, short_corpus, run_dag):
    pytest.importorskip("sentence_transformers")
    recipe = _recipe(tmp_path, short_corpus, "gpu_preflight_dag", EMBED)
    run = run_dag(recipe)
    assert run.state == "success"
    (job_dir,) = glob.glob(str(tmp_path / "work" / "[!_]*"))  # "_…": what jobs share, not jobs
    report = load_probe_report(job_dir)
    assert report is not None and report["status"] == "ok" and report["executor"] == "ray"
    (op,) = report["ops"]
    assert op["op_name"] == "text_embedding_mapper" and op["op_index"] == 1
    assert op["rows_in"] == 64 and op["output_ratio"] == 1.0 and op["rows_per_s"] > 0
    assert [r["op_name"] for r in op["replayed"]] == ["whitespace_normalization_mapper"]
    assert op["worker"]["pid"] != os.getpid()  # a Ray worker, not the task process
    with open(tmp_path / "gpu_preflight_dag_out.jsonl") as fh:
        rows = [json.loads(line) for line in fh]
    assert len(rows) == 96 and all(len(r["text_embedding"]) == 384 for r in rows)


def test_preflight_disabled_requires_explicit_num_gpus(tmp_path, corpus, fake_gpu_op):
    from airflow_provider_dj.operators.gpu_preflight import GpuPreflightOperator
    from airflow_provider_dj.operators.resume_validator import RecipeRefused

    recipe = _recipe(tmp_path, corpus, "no_probe", "  - fake_dag_cuda_mapper:\n", "  gpu_preflight_enabled: false")
    ctx = {"dag_run": SimpleNamespace(conf={}, dag_id="d", run_id="r", logical_date=None)}
    op = GpuPreflightOperator(task_id="gpu_preflight", recipe_path=recipe)
    # A recipe error fails the task without retries (RecipeRefused), as the validate task's do.
    with pytest.raises(
        RecipeRefused, match=r"process\[1\]\.fake_dag_cuda_mapper\.num_gpus.*gpu_preflight_enabled is false"
    ):
        op.execute(ctx)
    ok = _recipe(
        tmp_path,
        corpus,
        "no_probe_ok",
        "  - fake_dag_cuda_mapper:\n      num_gpus: 0.5\n",
        "  gpu_preflight_enabled: false",
    )
    out = GpuPreflightOperator(task_id="gpu_preflight", recipe_path=ok).execute(ctx)
    assert out == {"gpu_ops": ["fake_dag_cuda_mapper"], "probed": False, "skipped": True}
    assert not os.path.exists(tmp_path / "work")  # nothing written when the probe is skipped


@pytest.fixture
def fake_gpu_op(monkeypatch):
    """A CPU mapper that declares uses_cuda=True (a fake: no GPU here), registered for one test."""
    from airflow_provider_dj.ops import registry
    from airflow_provider_dj.ops.base import Mapper

    class FakeDagCudaMapper(Mapper):
        name = "fake_dag_cuda_mapper"
        uses_cuda = True

        def process_table(self, table):
            return table

    registry.load_builtin_ops()
    monkeypatch.setitem(registry._REGISTRY, FakeDagCudaMapper.name, FakeDagCudaMapper)
    return FakeDagCudaMapper
