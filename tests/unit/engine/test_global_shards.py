"""The sharded global step (engine/execution/global_shards.py) decides what the single-process step decides.

Real jobs through ``run_job`` in this process: a corpus whose exact and near duplicates span
partitions and key shards, three global ops (exact, MinHash, SimHash), exported with the
single-process step (``global_step_shards: 0``) and with 1, 7 and 64 key shards: the export, the
keep masks and the lineage must be the same bytes.  Then a key-shard task that fails mid-step: the
retry redoes only the shards that did not commit, and exports the same bytes.
"""

from __future__ import annotations

import glob
import json
import os
import random
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_provider_dj.engine import run_job
from airflow_provider_dj.engine.execution.shard_stages import row_items, shard_edges
from airflow_provider_dj.engine.jobdir.layout import FAULT_FILE, GLOBAL_SHARDS_DIR
from airflow_provider_dj.engine.planning.global_memory import (
    BYTES_PER_ITEM,
    GlobalStepTooLargeError,
    check_global_steps_fit,
    planned_shards,
)
from airflow_provider_dj.ops.registry import create_op
from tests.helpers_compare import assert_same_bytes

WORDS = [f"w{i}" for i in range(400)]

RECIPE = """\
project_name: shards
dataset_path: {data}
export_path: {export}
work_dir: {work}
partition:
  mode: manual
  num_of_partitions: 8
process:
  - document_deduplicator:
      lowercase: true
  - document_minhash_deduplicator:
      num_permutations: 64
      jaccard_threshold: 0.6
  - document_simhash_deduplicator:
      window_size: 3
"""


def _corpus(path, rows: int = 900, seed: int = 7) -> None:
    """Random texts, then exact copies (case changed), and near copies (one word changed) of earlier
    rows, spread over the whole input so duplicates cross partitions; some near copies of near copies."""
    rnd = random.Random(seed)
    texts: list[str] = []
    for _ in range(rows):
        roll = rnd.random()
        if texts and roll < 0.15:
            texts.append(rnd.choice(texts).upper())
        elif texts and roll < 0.4:
            words = rnd.choice(texts).lower().split()
            words[rnd.randrange(len(words))] = rnd.choice(WORDS)
            texts.append(" ".join(words))
        else:
            texts.append(" ".join(rnd.choice(WORDS) for _ in range(30)))
    with open(path, "w") as fh:
        for i, text in enumerate(texts):
            fh.write(json.dumps({"id": i, "text": text}) + "\n")


def _run(tmp_path, monkeypatch, shards: int, name: str, **kwargs):
    monkeypatch.setenv("DJ_GLOBAL_STEP_SHARDS", str(shards))
    recipe = tmp_path / f"{name}.yaml"
    recipe.write_text(
        RECIPE.format(data=tmp_path / "in.jsonl", export=tmp_path / f"{name}.jsonl", work=tmp_path / "work")
    )
    if "resume" not in kwargs:
        kwargs["job_id"] = name
    return run_job(str(recipe), workers=1, **kwargs)


def _lineage_bytes(job_dir: str) -> dict[str, pa.Table]:
    return {
        os.path.relpath(p, job_dir): pq.read_table(p)
        for p in sorted(glob.glob(os.path.join(job_dir, "lineage", "*", "*.parquet")))
    }


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("shards_corpus")
    _corpus(root / "in.jsonl")
    return root / "in.jsonl"


def test_export_and_lineage_identical_for_any_shard_count(tmp_path, monkeypatch, corpus):
    (tmp_path / "in.jsonl").write_bytes(corpus.read_bytes())
    single = _run(tmp_path, monkeypatch, 0, "single")
    want = (tmp_path / "single.jsonl").read_bytes()
    assert 300 < single.rows < 900  # the corpus has exact and near duplicates
    assert not glob.glob(os.path.join(single.job_dir, GLOBAL_SHARDS_DIR, "*"))
    for shards in (1, 7, 64):
        result = _run(tmp_path, monkeypatch, shards, f"k{shards}")
        assert_same_bytes((tmp_path / f"k{shards}.jsonl").read_bytes(), want, f"export with {shards} shards")
        # one stage folder per global op, each with one edge folder per key shard
        folders = sorted(glob.glob(os.path.join(result.job_dir, GLOBAL_SHARDS_DIR, "op_*")))
        assert len(folders) == 3
        assert all(len(glob.glob(os.path.join(f, "edges", "key_*", "done.json"))) == shards for f in folders)
        got, ref = _lineage_bytes(result.job_dir), _lineage_bytes(single.job_dir)
        assert sorted(got) == sorted(ref)
        for rel in ref:
            assert got[rel].equals(ref[rel]), f"{rel} differs with {shards} shards"


def test_a_failed_shard_task_is_redone_alone(tmp_path, monkeypatch, corpus):
    (tmp_path / "in.jsonl").write_bytes(corpus.read_bytes())
    _run(tmp_path, monkeypatch, 0, "ref")
    job_dir = tmp_path / "work" / "faulty"
    job_dir.mkdir(parents=True)
    # the first key-shard task of the MinHash op raises after writing its edges, before its done marker
    (job_dir / FAULT_FILE).write_text(json.dumps([{"point": "global_shard", "op_index": 1, "times": 1}]))
    with pytest.raises(Exception, match="injected fault at global_shard"):
        _run(tmp_path, monkeypatch, 5, "faulty")
    (folder,) = glob.glob(os.path.join(job_dir, GLOBAL_SHARDS_DIR, "op_001_*"))
    done = sorted(glob.glob(os.path.join(folder, "edges", "key_*", "done.json")))
    assert len(done) == 0  # the first task failed: none committed
    scatter = {p: os.stat(p).st_mtime_ns for p in glob.glob(os.path.join(folder, "scatter", "*.arrow"))}
    assert len(scatter) == 8
    _run(tmp_path, monkeypatch, 5, "faulty", resume="faulty")
    assert_same_bytes(
        (tmp_path / "faulty.jsonl").read_bytes(), (tmp_path / "ref.jsonl").read_bytes(), "export after the retry"
    )
    # scatter files committed before the failure were not rewritten
    assert {p: os.stat(p).st_mtime_ns for p in scatter} == scatter


def test_shard_edges_link_each_duplicate_to_its_first_row():
    op = create_op("document_deduplicator", {}, "text")
    table = pa.table({"text": ["a", "b", "a", "c", "b", "a"]})
    keys = pa.table({"key": op.compute_hash(table)})
    items = row_items(op, keys, 3)
    u, v = shard_edges(op, *items)
    base = 3 << 32
    assert sorted(zip(u.tolist(), v.tolist())) == [(base + 2, base), (base + 4, base + 1), (base + 5, base)]


def _plan_and_recipe(tracer: bool = False):
    op = SimpleNamespace(name="document_deduplicator", args={}, is_global=True)
    recipe = SimpleNamespace(
        text_key="text",
        dedup_history=None,
        tracer=SimpleNamespace(open_tracer=tracer, op_list_to_trace=[]),
    )
    return SimpleNamespace(ops=[op]), recipe


def test_the_planner_plans_shards_where_one_process_could_not_hold_the_keys(monkeypatch):
    plan, recipe = _plan_and_recipe()
    limit = 24 * 10**9
    # a billion rows: refused in one process (78 GB), planned in shards of at most 1 GiB each
    check_global_steps_fit(plan, 10**9, limit_bytes=limit, recipe=recipe, max_partition_rows=10**6)
    op_impl = create_op("document_deduplicator", {}, "text")
    shards = planned_shards(op_impl, 10**9, limit)
    assert shards == -(-(10**9 * BYTES_PER_ITEM) // (1024 << 20))
    assert planned_shards(op_impl, 1000, limit) == 0  # small: the single-process step
    with pytest.raises(GlobalStepTooLargeError, match="a partition's keep mask of 6.40 GB .* use more partitions"):
        check_global_steps_fit(plan, 10**9, limit_bytes=limit, recipe=recipe, max_partition_rows=10**8)
    monkeypatch.setenv("DJ_GLOBAL_STEP_SHARDS", "4")
    with pytest.raises(GlobalStepTooLargeError, match=r"needs 4 key shards of 20\.00 GB each.* global_step_shards"):
        check_global_steps_fit(plan, 10**9, limit_bytes=limit, recipe=recipe, max_partition_rows=10**6)


def test_a_traced_op_stays_in_one_process_and_is_refused_past_its_memory():
    plan, recipe = _plan_and_recipe(tracer=True)
    with pytest.raises(GlobalStepTooLargeError, match="the recipe's open_tracer reads every key at once"):
        check_global_steps_fit(plan, 10**9, limit_bytes=24 * 10**9, recipe=recipe, max_partition_rows=10**6)


def test_a_job_past_the_single_step_limit_runs_sharded(tmp_path, monkeypatch, corpus):
    (tmp_path / "in.jsonl").write_bytes(corpus.read_bytes())
    _run(tmp_path, monkeypatch, 0, "ref")
    monkeypatch.setenv("DJ_GLOBAL_STEP_MEMORY_LIMIT_GB", str(100 * 78 / 1e9))  # room for 100 rows' keys
    result = _run(tmp_path, monkeypatch, 0, "planned")
    assert len(glob.glob(os.path.join(result.job_dir, GLOBAL_SHARDS_DIR, "op_*"))) == 3
    assert_same_bytes((tmp_path / "planned.jsonl").read_bytes(), (tmp_path / "ref.jsonl").read_bytes())
