"""Lineage names the row every deduplicator's duplicate was kept against (exact, MinHash, SimHash).

Real engine, real files (in-process through ``run_prepared_job``; no Airflow, no Ray).
The near-duplicates below sit in both partitions, so the match crosses a partition boundary; the
MinHash band is checked with the op's own hashing (``compute_hash``), not with lineage's.
"""

from __future__ import annotations

import glob
import json
import shutil

import pyarrow as pa
import pytest

from airflow_provider_dj.engine.config.recipe import load_recipe
from airflow_provider_dj.engine.job.setup import prepare_job
from airflow_provider_dj.engine.observe.lineage_query import JobLineage, why
from airflow_provider_dj.engine.runner.local import run_prepared_job
from airflow_provider_dj.ops.registry import create_op

BASE = "the river bank was quiet that morning and the old ferry waited for the first travellers of the day"
ROWS = [
    {"id": "a", "text": "a completely different sentence about trains stations and tickets sold at dawn"},  # 0
    {"id": "b", "text": BASE},  # 1: kept, the cluster's representative
    {"id": "c", "text": "short unrelated note on the weather in spring and how rain falls on roofs"},  # 2
    {"id": "d", "text": BASE + " again"},  # 3: near-duplicate of 1 (other partition)
    {"id": "e", "text": BASE.replace("quiet", "calm")},  # 4: near-duplicate of 1
    {"id": "f", "text": "yet another unrelated line listing apples pears plums and cherries at the market"},  # 5
]
OPS = {
    "document_minhash_deduplicator": {"window_size": 3},
    "document_simhash_deduplicator": {"window_size": 1, "num_blocks": 8, "hamming_distance": 5},
    "document_deduplicator": {},
}


def run_job(tmp_path, op_name: str, rows=ROWS):
    data = tmp_path / "in.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    recipe = tmp_path / f"{op_name}.yaml"
    recipe.write_text(
        f"dataset_path: {data}\nexport_path: {tmp_path / op_name}.jsonl\nwork_dir: {tmp_path / 'work'}\n"
        f"partition: {{mode: manual, num_of_partitions: 2}}\ncheckpoint: {{strategy: every_op}}\n"
        f"process:\n  - {op_name}: {json.dumps(OPS[op_name])}\n"
    )
    job = prepare_job(load_recipe(str(recipe)), job_id=op_name)
    run_prepared_job(job)
    return job.job_dir, tmp_path / f"{op_name}.jsonl"


@pytest.mark.parametrize("op_name", ["document_minhash_deduplicator", "document_simhash_deduplicator"])
def test_near_duplicate_names_its_clusters_kept_row(tmp_path, op_name):
    job_dir, export = run_job(tmp_path, op_name)
    assert [json.loads(x)["id"] for x in export.read_text().splitlines()] == ["a", "b", "c", "f"]
    for row in (3, 4):
        [p] = why(job_dir, input_row=row)
        s = p.steps[0]
        assert (p.fate, s.fate, s.duplicate_of, s.duplicate_of_partition) == ("duplicate", "duplicate", 1, 0)
        assert "near-duplicate of input row 1 (partition 0)" in s.reason
        [kept] = why(job_dir, input_row=s.duplicate_of)
        assert kept.fate == "kept"  # the row it was kept against is in the export
    if op_name == "document_simhash_deduplicator":
        assert why(job_dir, input_row=3)[0].steps[0].band is None  # no bands in SimHash
        return
    # MinHash: the named band really is shared, by the op's own hashing of the two texts.
    op = create_op(op_name, OPS[op_name], "text")
    for row in (3, 4):
        s = why(job_dir, input_row=row)[0].steps[0]
        assert s.band is not None and f"(LSH band {s.band})" in s.reason
        bands = op.compute_hash(pa.table({"text": [ROWS[row]["text"], ROWS[s.duplicate_of]["text"]]}))
        col = bands.column(f"band_{s.band}").to_pylist()
        assert col[0] == col[1]
        assert all(bands.column(f"band_{b}")[0] != bands.column(f"band_{b}")[1] for b in range(s.band))


def test_exact_duplicate_is_recorded_not_derived(tmp_path):
    rows = ROWS[:3] + [dict(ROWS[1], id="d")] + ROWS[4:]
    job_dir, _ = run_job(tmp_path, "document_deduplicator", rows)
    [keys] = glob.glob(f"{job_dir}/checkpoints/dedup_keys_op_*")
    shutil.rmtree(keys)  # the keys it was once derived from: gone (as after a retention policy)
    jl = JobLineage(job_dir)
    t = jl.of(1).table
    assert t.column("input_row").to_pylist() == [3] and t.column("dup_of_row").to_pylist() == [1]
    s = jl.path(3).steps[0]
    assert (s.duplicate_of, s.duplicate_of_partition) == (1, 0)
    assert s.reason == "document_deduplicator removed it as a duplicate of input row 1 (partition 0)"
