"""MinHash / SimHash dedup through the generated DAG: Data-Juicer 1.6.1's kept
rows, for 1, 3 and 8 partitions.

Expected rows come from tests/conformance/near_dedup (DJ's
whitespace_normalization_mapper followed by the dedup, default arguments).
"""

from __future__ import annotations

import glob
import json
import os

import pytest

from tests.integration.conftest import read_jsonl

pytestmark = pytest.mark.integration

FIX = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "conformance", "near_dedup")

RECIPE = """\
project_name: {name}
dataset_path: {data}
export_path: {export}
work_dir: {work}
text_keys: text
partition:
  mode: manual
  num_of_partitions: {parts}
process:
  - whitespace_normalization_mapper:
  - {op}:
"""


@pytest.mark.parametrize("parts", [1, 3, 8])
@pytest.mark.parametrize("op", ["document_minhash_deduplicator", "document_simhash_deduplicator"])
def test_near_dedup_matches_data_juicer_for_any_partition_count(tmp_path, run_dag, op, parts):
    short = "minhash" if "minhash" in op else "simhash"
    recipe = tmp_path / "near.yaml"
    recipe.write_text(
        RECIPE.format(
            name=f"near_{short}_{parts}",
            data=os.path.join(FIX, "inputs", "near_dup.jsonl"),
            export=tmp_path / "out.jsonl",
            work=tmp_path / "work",
            parts=parts,
            op=op,
        )
    )
    dr = run_dag(str(recipe), {"job_id": f"{short}{parts}"})
    assert str(dr.state).endswith("success")
    got = [(r["id"], r["text"]) for r in read_jsonl(tmp_path / "out.jsonl")]
    want = [(r["id"], r["text"]) for r in read_jsonl(os.path.join(FIX, "expected", f"pipeline__{op}.jsonl"))]
    assert got == want


def test_near_dedup_in_key_shards_on_ray_matches_data_juicer(tmp_path, run_dag, monkeypatch):
    """The global step in 5 key shards (engine/execution/global_shards.py), its tasks on the embedded
    Ray the DAG's tasks use: Data-Juicer's kept rows, and a stage folder with 5 committed key shards.
    (SimHash in shards is compared with the single-process step in tests/unit/engine/test_global_shards.py.)"""
    op, short = "document_minhash_deduplicator", "minhash"
    monkeypatch.setenv("DJ_GLOBAL_STEP_SHARDS", "5")
    recipe = tmp_path / "near.yaml"
    recipe.write_text(
        RECIPE.format(
            name=f"near_{short}_shards",
            data=os.path.join(FIX, "inputs", "near_dup.jsonl"),
            export=tmp_path / "out.jsonl",
            work=tmp_path / "work",
            parts=8,
            op=op,
        )
    )
    dr = run_dag(str(recipe), {"job_id": f"{short}_shards"})
    assert str(dr.state).endswith("success")
    got = [(r["id"], r["text"]) for r in read_jsonl(tmp_path / "out.jsonl")]
    want = [(r["id"], r["text"]) for r in read_jsonl(os.path.join(FIX, "expected", f"pipeline__{op}.jsonl"))]
    assert got == want
    done = glob.glob(
        str(tmp_path / "work" / f"{short}_shards" / "global_shards" / "op_001_*" / "edges" / "*" / "done.json")
    )
    assert len(done) == 5


def test_a_shard_task_whose_ray_worker_dies_is_retried(tmp_path, run_dag, monkeypatch):
    """The first key-shard task's Ray worker exits hard (os._exit) after writing its edges, before its
    commit: Ray retries the task, the global step succeeds on its first try, and the export is
    Data-Juicer's."""
    op = "document_minhash_deduplicator"
    monkeypatch.setenv("DJ_GLOBAL_STEP_SHARDS", "5")
    recipe = tmp_path / "near.yaml"
    recipe.write_text(
        RECIPE.format(
            name="near_minhash_killed",
            data=os.path.join(FIX, "inputs", "near_dup.jsonl"),
            export=tmp_path / "out.jsonl",
            work=tmp_path / "work",
            parts=8,
            op=op,
        )
    )
    job_dir = tmp_path / "work" / "killed"
    job_dir.mkdir(parents=True)
    (job_dir / "_fault_injection.json").write_text(
        json.dumps([{"point": "global_shard", "op_index": 1, "kind": "exit", "times": 1}])
    )
    dr = run_dag(str(recipe), {"job_id": "killed"})
    assert str(dr.state).endswith("success")
    assert len(os.listdir(job_dir / "_fault_injection.fired")) == 1  # the worker did die once
    got = [(r["id"], r["text"]) for r in read_jsonl(tmp_path / "out.jsonl")]
    want = [(r["id"], r["text"]) for r in read_jsonl(os.path.join(FIX, "expected", f"pipeline__{op}.jsonl"))]
    assert got == want
    (ti,) = [t for t in dr.get_task_instances() if t.task_id.startswith("global_op1")]
    assert ti.try_number == 1  # Ray retried the task; Airflow did not retry the step


def test_a_budget_bound_task_runs_in_a_worker_of_its_own(ray_cluster):
    """``in_fresh_worker`` tasks (a key shard's resolve, a node shard's partner answers) each get a Ray
    worker that exits after them, so a task's peak never includes what an earlier task left in a reused
    worker's heap; unmarked tasks share the pool's workers."""
    from airflow_provider_dj.engine.execution.shard_partners import answer_partners
    from airflow_provider_dj.engine.execution.shard_stages import resolve_key_shard
    from airflow_provider_dj.engine.input.task_map import FRESH_WORKER, in_fresh_worker, ray_task_runner

    assert getattr(resolve_key_shard, FRESH_WORKER) and getattr(answer_partners, FRESH_WORKER)

    def worker_pid(_i: int) -> int:  # a closure: pickled by value, as the workers cannot import tests/
        import os

        return os.getpid()

    shared = ray_task_runner(worker_pid, [(i,) for i in range(6)])
    assert len(set(shared)) < 6  # two CPUs: six short tasks reuse workers

    def fresh_pid(_i: int) -> int:
        import os

        return os.getpid()

    pids = ray_task_runner(in_fresh_worker(fresh_pid), [(i,) for i in range(6)])
    assert len(set(pids)) == 6  # a worker per task
