"""The sharded global step (engine/execution/global_shards.py) decides what the single-process step decides.

Real jobs through ``run_job`` in this process: a corpus whose exact and near duplicates span
partitions and key shards, three global ops (exact, MinHash, SimHash), exported with the
single-process step (``global_step_shards: 0``) and with 1, 7 and 64 key shards: the export, the
keep masks and the lineage must be the same bytes.  Then a key-shard task that fails mid-step: the
retry redoes only the shards that did not commit, and exports the same bytes.  The tracer's duplicate
pairs and deduplication against history (``dedup_history``) run from the shards too: the trace files,
the history duplicates and the mask tables (with their lineage columns) are the same bytes as the
single-process step's.
"""

from __future__ import annotations

import glob
import json
import os
import random
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_provider_dj.engine import run_job
from airflow_provider_dj.engine.execution import global_shards
from airflow_provider_dj.engine.execution.shard_stages import (
    ShardTooLargeError,
    resolve_key_shard,
    row_items,
    shard_edges,
)
from airflow_provider_dj.engine.input.task_map import run_in_process
from airflow_provider_dj.engine.jobdir.layout import FAULT_FILE, GLOBAL_SHARDS_DIR
from airflow_provider_dj.engine.planning.global_memory import (
    BYTES_PER_ITEM,
    WORKER_OWN_BYTES,
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


def _run(tmp_path, monkeypatch, shards: int, name: str, extra: str = "", **kwargs):
    monkeypatch.setenv("DJ_GLOBAL_STEP_SHARDS", str(shards))
    # The step's tasks one by one in this process, in order, even where an earlier test of this worker left
    # a Ray initialized (the default runs them there, all at once): a fault then hits a known task.
    monkeypatch.setattr(global_shards, "default_task_runner", lambda: run_in_process)
    recipe = tmp_path / f"{name}.yaml"
    recipe.write_text(
        RECIPE.format(data=tmp_path / "in.jsonl", export=tmp_path / f"{name}.jsonl", work=tmp_path / "work") + extra
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
        # lineage's representatives were looked up through the partner files: a request file per
        # partition, an answer file per node shard (at most one per partition)
        for f in folders:
            assert len(glob.glob(os.path.join(f, "partners", "requests", "*.arrow"))) == 8
            assert len(glob.glob(os.path.join(f, "partners", "answers", "*.arrow"))) == min(shards, 8)
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
    assert len(scatter) == 16  # 8 partitions: their items and their local edges
    _run(tmp_path, monkeypatch, 5, "faulty", resume="faulty")
    assert_same_bytes(
        (tmp_path / "faulty.jsonl").read_bytes(), (tmp_path / "ref.jsonl").read_bytes(), "export after the retry"
    )
    # scatter files committed before the failure were not rewritten
    assert {p: os.stat(p).st_mtime_ns for p in scatter} == scatter


def test_a_failed_mask_task_redoes_neither_the_partner_look_up_nor_other_masks(tmp_path, monkeypatch, corpus):
    (tmp_path / "in.jsonl").write_bytes(corpus.read_bytes())
    ref = _run(tmp_path, monkeypatch, 0, "ref")
    job_dir = tmp_path / "work" / "faulty"
    job_dir.mkdir(parents=True)
    # partition 5's mask task of the MinHash op raises after committing its mask; masks 0-4 committed before it
    (job_dir / FAULT_FILE).write_text(
        json.dumps([{"point": "global_mid", "op_index": 1, "partition_id": 5, "times": 1}])
    )
    with pytest.raises(Exception, match="injected fault at global_mid"):
        _run(tmp_path, monkeypatch, 3, "faulty")
    (folder,) = glob.glob(os.path.join(job_dir, GLOBAL_SHARDS_DIR, "op_001_*"))
    partner_files = glob.glob(os.path.join(folder, "partners", "*", "*.arrow"))
    assert len(partner_files) == 8 + 3  # a request file per partition, an answer file per node shard
    before = {p: os.stat(p).st_mtime_ns for p in partner_files}
    _run(tmp_path, monkeypatch, 3, "faulty", resume="faulty")
    assert_same_bytes(
        (tmp_path / "faulty.jsonl").read_bytes(), (tmp_path / "ref.jsonl").read_bytes(), "export after the retry"
    )
    assert {p: os.stat(p).st_mtime_ns for p in before} == before
    got, want = _lineage_bytes(str(job_dir)), _lineage_bytes(ref.job_dir)
    assert sorted(got) == sorted(want) and all(got[k].equals(want[k]) for k in want)


def test_one_huge_cluster_costs_the_partner_answers_one_row(tmp_path, monkeypatch):
    """Every row a copy of the first (case changed): each removed row asks for the same representative,
    so the answer files hold it once, however many rows ask; the export and lineage are the single step's."""
    rows = [{"id": i, "text": ("Same Text " * 8) if i % 2 else ("same text " * 8)} for i in range(400)]
    (tmp_path / "in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    single = _run(tmp_path, monkeypatch, 0, "single")
    sharded = _run(tmp_path, monkeypatch, 3, "k3")
    assert single.rows == 1
    assert_same_bytes((tmp_path / "k3.jsonl").read_bytes(), (tmp_path / "single.jsonl").read_bytes(), "export")
    (folder,) = glob.glob(os.path.join(sharded.job_dir, GLOBAL_SHARDS_DIR, "op_000_*"))
    import pyarrow.ipc as ipc

    asked = sum(
        ipc.open_file(p).read_all().num_rows for p in glob.glob(os.path.join(folder, "partners", "requests", "*"))
    )
    answered = sum(
        ipc.open_file(p).read_all().num_rows for p in glob.glob(os.path.join(folder, "partners", "answers", "*"))
    )
    assert (asked, answered) == (399, 1)
    got, want = _lineage_bytes(sharded.job_dir), _lineage_bytes(single.job_dir)
    assert sorted(got) == sorted(want) and all(got[k].equals(want[k]) for k in want)


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
    assert shards == -(-(10**9 * BYTES_PER_ITEM) // ((1024 << 20) - WORKER_OWN_BYTES))  # the budget less the worker
    assert planned_shards(op_impl, 1000, limit) == 0  # small: the single-process step
    with pytest.raises(GlobalStepTooLargeError, match="a partition's keep mask of 6.40 GB .* use more partitions"):
        check_global_steps_fit(plan, 10**9, limit_bytes=limit, recipe=recipe, max_partition_rows=10**8)
    monkeypatch.setenv("DJ_GLOBAL_STEP_SHARDS", "4")
    with pytest.raises(GlobalStepTooLargeError, match=r"needs 4 key shards of 26\.00 GB each.* global_step_shards"):
        check_global_steps_fit(plan, 10**9, limit_bytes=limit, recipe=recipe, max_partition_rows=10**6)


def test_a_traced_op_is_planned_in_shards_past_one_process():
    # The tracer's pairs come from the shards' mask tasks now: a traced op is no longer held in one
    # process, so a billion rows plan in shards instead of being refused.
    plan, recipe = _plan_and_recipe(tracer=True)
    check_global_steps_fit(plan, 10**9, limit_bytes=24 * 10**9, recipe=recipe, max_partition_rows=10**6)


def test_a_job_past_the_single_step_limit_runs_sharded(tmp_path, monkeypatch, corpus):
    (tmp_path / "in.jsonl").write_bytes(corpus.read_bytes())
    _run(tmp_path, monkeypatch, 0, "ref")
    monkeypatch.setenv("DJ_GLOBAL_STEP_MEMORY_LIMIT_GB", str(100 * 78 / 1e9))  # room for 100 rows' keys
    result = _run(tmp_path, monkeypatch, 0, "planned")
    assert len(glob.glob(os.path.join(result.job_dir, GLOBAL_SHARDS_DIR, "op_*"))) == 3
    assert_same_bytes((tmp_path / "planned.jsonl").read_bytes(), (tmp_path / "ref.jsonl").read_bytes())


def _same_files(got_dir: str, ref_dir: str, pattern: str) -> list[str]:
    ref = sorted(os.path.relpath(p, ref_dir) for p in glob.glob(os.path.join(ref_dir, pattern)))
    got = sorted(os.path.relpath(p, got_dir) for p in glob.glob(os.path.join(got_dir, pattern)))
    assert got == ref and ref, f"{pattern}: {got} vs {ref}"
    for rel in ref:
        with open(os.path.join(got_dir, rel), "rb") as a, open(os.path.join(ref_dir, rel), "rb") as b:
            assert_same_bytes(a.read(), b.read(), rel)
    return ref


@pytest.mark.parametrize("trace_num", [5, 40])
def test_duplicate_traces_identical_from_the_shards(tmp_path, monkeypatch, corpus, trace_num):
    # 40 pairs reach past the first partition (about 110 rows): partitions whose removed rows share a
    # representative with an earlier partition's are skipped as the single-process step skips them.
    (tmp_path / "in.jsonl").write_bytes(corpus.read_bytes())
    extra = f"open_tracer: true\ntrace_num: {trace_num}\n"
    single = _run(tmp_path, monkeypatch, 0, "single", extra)
    sharded = _run(tmp_path, monkeypatch, 7, "k7", extra)
    assert len(glob.glob(os.path.join(sharded.job_dir, GLOBAL_SHARDS_DIR, "op_*"))) == 3
    files = _same_files(sharded.job_dir, single.job_dir, os.path.join("trace", "duplicate-*.jsonl"))
    assert len(files) == 3
    counts = {}
    for rel in files:
        entries = [json.loads(line) for line in open(os.path.join(single.job_dir, rel))]
        assert entries and all(e["dup1"] and e["dup2"] for e in entries)
        rows = [e["dup2"]["__dj__input_row__"] for e in entries]
        assert rows == sorted(rows)
        counts[rel] = (len(entries), rows[-1])
    assert max(n for n, _ in counts.values()) == trace_num, counts
    assert trace_num < 40 or max(last for _, last in counts.values()) > 120, counts  # past partition 0
    assert_same_bytes((tmp_path / "k7.jsonl").read_bytes(), (tmp_path / "single.jsonl").read_bytes(), "export")


HISTORY = """\
open_tracer: true
trace_num: 5
dedup_history:
  path: {path}
  ops: [document_deduplicator, document_minhash_deduplicator]
"""


def _night(tmp_path, monkeypatch, shards: int, name: str, data, history, **kwargs):
    monkeypatch.setenv("DJ_GLOBAL_STEP_SHARDS", str(shards))
    recipe = tmp_path / f"{name}.yaml"
    text = RECIPE.format(data=data, export=tmp_path / f"{name}.jsonl", work=tmp_path / "work")
    recipe.write_text(text + HISTORY.format(path=history))
    return run_job(str(recipe), workers=1, **(kwargs or {"job_id": name}))


def test_dedup_history_from_the_shards_is_identical(tmp_path, monkeypatch, corpus):
    import shutil

    lines = corpus.read_bytes().splitlines(keepends=True)
    # Night 1: the first 400 rows, exported, its keys committed to the history.  Night 2: rows 250 on, so
    # its first 150 rows are exact copies of night-1 rows and many later ones near copies.
    (tmp_path / "n1.jsonl").write_bytes(b"".join(lines[:400]))
    (tmp_path / "n2.jsonl").write_bytes(b"".join(lines[250:]))
    _night(tmp_path, monkeypatch, 0, "night1", tmp_path / "n1.jsonl", tmp_path / "hist_a")
    for copy in ("hist_b", "hist_c"):  # every night-2 run checks the same version 1
        shutil.copytree(tmp_path / "hist_a", tmp_path / copy)
    single = _night(tmp_path, monkeypatch, 0, "n2_single", tmp_path / "n2.jsonl", tmp_path / "hist_a")
    sharded = _night(tmp_path, monkeypatch, 7, "n2_k7", tmp_path / "n2.jsonl", tmp_path / "hist_b")
    # A sharded night 2 that fails after its first keep mask of the exact op committed, then resumes:
    # the history duplicates and traces, written before any mask commits, are written again, the same.
    faulty = tmp_path / "work" / "n2_fault"
    faulty.mkdir(parents=True)
    (faulty / FAULT_FILE).write_text(json.dumps([{"point": "global_mid", "op_index": 0, "times": 1}]))
    with pytest.raises(Exception, match="injected fault at global_mid"):
        _night(tmp_path, monkeypatch, 7, "n2_fault", tmp_path / "n2.jsonl", tmp_path / "hist_c")
    assert (faulty / "dedup_history" / "op_000_document_deduplicator.parquet").exists()
    _night(tmp_path, monkeypatch, 7, "n2_fault", tmp_path / "n2.jsonl", tmp_path / "hist_c", resume="n2_fault")
    assert_same_bytes((tmp_path / "n2_fault.jsonl").read_bytes(), (tmp_path / "n2_single.jsonl").read_bytes())
    for pattern in ("dedup_history/op_*.parquet", "trace/duplicate-*.jsonl", "checkpoints/dedup_mask_op_*/*.arrow"):
        _same_files(str(faulty), single.job_dir, pattern)
    assert len(glob.glob(os.path.join(sharded.job_dir, GLOBAL_SHARDS_DIR, "op_*"))) == 3
    assert not glob.glob(os.path.join(single.job_dir, GLOBAL_SHARDS_DIR, "*"))
    assert_same_bytes((tmp_path / "n2_k7.jsonl").read_bytes(), (tmp_path / "n2_single.jsonl").read_bytes(), "export")
    found = _same_files(sharded.job_dir, single.job_dir, os.path.join("dedup_history", "op_*.parquet"))
    assert len(found) == 2
    dups = [pq.read_table(os.path.join(single.job_dir, rel)) for rel in found]
    assert all(t.num_rows > 0 for t in dups)
    traces = _same_files(sharded.job_dir, single.job_dir, os.path.join("trace", "duplicate-*.jsonl"))
    for rel in traces[:2]:  # the exact and MinHash ops: in-night pairs, then history pairs
        entries = [json.loads(line) for line in open(os.path.join(single.job_dir, rel))]
        assert [e.get("history_duplicate", False) for e in entries] == [False] * 5 + [True] * 5, rel
    # the keep masks with their lineage columns (history_job, history_row, dup_band), byte for byte
    masks = _same_files(sharded.job_dir, single.job_dir, os.path.join("checkpoints", "dedup_mask_op_*", "*.arrow"))
    assert len(masks) == 3 * 8
    for rel in masks:
        table = pa.ipc.open_file(os.path.join(single.job_dir, rel)).read_all()
        if "op_002" not in rel:
            assert {"history_job", "history_row"} <= set(table.column_names), rel
    got, ref = _lineage_bytes(sharded.job_dir), _lineage_bytes(single.job_dir)
    assert sorted(got) == sorted(ref)
    for rel in ref:
        assert got[rel].equals(ref[rel]), f"{rel} differs with 7 shards"
    # A mask task looks its rows up in batches within its budget: the same duplicates as in one batch.
    from airflow_provider_dj.engine.history.lookup import LOOKUP_BYTES_PER_KEY, find_history_duplicates
    from airflow_provider_dj.engine.storage.context import JobContext
    from airflow_provider_dj.engine.storage.global_op_state import keys_store

    ctx = JobContext(single.job_dir)
    op = ctx.plan.ops[1]
    op_impl = create_op(op.name, op.args, ctx.recipe.text_key)
    part = ctx.partitioning_info["partitions"][0]
    keys = keys_store(single.job_dir).load_valid(1, op.name, 0, part["content_hash"], op.fingerprint).table
    rows = np.arange(0, keys.num_rows, 2)
    whole = find_history_duplicates(single.job_dir, op_impl, keys, rows, memory_bytes=1 << 20)
    per_row = op_impl.num_bands * LOOKUP_BYTES_PER_KEY
    batched = find_history_duplicates(single.job_dir, op_impl, keys, rows, memory_bytes=4096, query_bytes=3 * per_row)
    assert len(whole) > 0 and whole.positions.tolist() == batched.positions.tolist()
    assert batched.table().equals(whole.table())


def _skewed_corpus(path, rows: int, hot_share: float, seed: int = 5) -> None:
    """``hot_share`` of the rows one text (a skewed key: boilerplate), the rest distinct."""
    rnd = random.Random(seed)
    with open(path, "w") as fh:
        for i in range(rows):
            text = (
                "the same boilerplate line"
                if rnd.random() < hot_share
                else f"row {i} " + " ".join(rnd.choice(WORDS) for _ in range(8))
            )
            fh.write(json.dumps({"id": i, "text": text}) + "\n")


def _skew_recipe(tmp_path, name: str) -> str:
    recipe = tmp_path / f"{name}.yaml"
    recipe.write_text(
        f"project_name: skew\ndataset_path: {tmp_path / 'in.jsonl'}\nexport_path: {tmp_path / name}.jsonl\n"
        f"work_dir: {tmp_path / 'work'}\npartition:\n  mode: manual\n  num_of_partitions: 8\n"
        "process:\n  - document_deduplicator:\n"
    )
    return str(recipe)


def test_a_skewed_key_costs_its_shard_one_item_per_partition(tmp_path, monkeypatch):
    _skewed_corpus(tmp_path / "in.jsonl", 4000, hot_share=0.6)
    monkeypatch.setenv("DJ_GLOBAL_STEP_SHARDS", "0")
    single = run_job(_skew_recipe(tmp_path, "single"), job_id="single", workers=1)
    monkeypatch.setenv("DJ_GLOBAL_STEP_SHARDS", "7")
    sharded = run_job(_skew_recipe(tmp_path, "sharded"), job_id="sharded", workers=1)
    assert_same_bytes((tmp_path / "sharded.jsonl").read_bytes(), (tmp_path / "single.jsonl").read_bytes())
    assert single.rows == sharded.rows < 2000
    (folder,) = glob.glob(os.path.join(sharded.job_dir, GLOBAL_SHARDS_DIR, "op_000_*"))
    items = 0
    for path in glob.glob(os.path.join(folder, "scatter", "part_*.arrow")):
        reader = pa.ipc.open_file(path)
        items += sum(reader.get_batch(i).num_rows for i in range(reader.num_record_batches))
    # the ~2,400 copies of the hot text reach the key shards as one item per partition
    assert items == sharded.rows - 1 + 8
    for rel, table in _lineage_bytes(single.job_dir).items():
        assert _lineage_bytes(sharded.job_dir)[rel].equals(table), rel


def test_a_shard_past_twice_the_budget_fails_naming_it_and_keeps_what_committed(tmp_path, monkeypatch):
    """The planner sizes shards from the rows, so a shard past its budget is skew it could not see (a
    SimHash bucket of many distinct values); here the key-shard task of a finished step is rerun with a
    budget its shard exceeds: it fails naming the shard and the settings, before writing anything."""
    _skewed_corpus(tmp_path / "in.jsonl", 30000, hot_share=0.0)
    monkeypatch.setenv("DJ_GLOBAL_STEP_SHARDS", "1")
    result = run_job(_skew_recipe(tmp_path, "tight"), job_id="tight", workers=1)
    (folder,) = glob.glob(os.path.join(result.job_dir, GLOBAL_SHARDS_DIR, "op_000_*"))
    done = os.path.join(folder, "edges", "key_0000", "done.json")
    os.remove(done)
    before = {p: os.stat(p).st_mtime_ns for p in glob.glob(os.path.join(folder, "*", "*.arrow"))}
    with pytest.raises(
        ShardTooLargeError, match=r"key shard 0 holds more than .* global_shard_memory_mb = 257 MB, of which"
    ):
        resolve_key_shard(result.job_dir, 0, folder, 0, 8, 1, 1 << 20)  # 30,000 items need about 2.3 MiB
    assert not os.path.exists(done)
    assert {p: os.stat(p).st_mtime_ns for p in before} == before
    assert resolve_key_shard(result.job_dir, 0, folder, 0, 8, 1, 64 << 20)["edges"] == 0


@pytest.mark.parametrize(
    "name, value",
    [
        ("DJ_GLOBAL_SHARD_MEMORY_MB", "0"),
        # the budget bounds a task's whole process: one its Ray worker alone would fill leaves no room for data
        ("DJ_GLOBAL_SHARD_MEMORY_MB", "256"),
        ("DJ_GLOBAL_STEP_SHARDS", "-2"),
        ("DJ_GLOBAL_STEP_IN_PROCESS_MAX_MB", "-1"),
    ],
)
def test_a_bad_shard_setting_is_refused_before_any_work_naming_the_variable(tmp_path, monkeypatch, name, value):
    from airflow_provider_dj.settings import SettingError

    _skewed_corpus(tmp_path / "in.jsonl", 200, hot_share=0.0)
    monkeypatch.setenv(name, value)
    with pytest.raises(SettingError, match=rf"^{name}={value}: .* must be at least .* unset it for the default"):
        run_job(_skew_recipe(tmp_path, "bad"), job_id="bad", workers=1)
    assert not (tmp_path / "work" / "bad").exists()
