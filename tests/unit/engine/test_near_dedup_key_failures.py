"""MinHash and SimHash and the rows their key phase cannot key (engine/execution/key_rows.py).

A row whose signature the kernel cannot compute is, with ``skip_op_error``, set aside in ``failed/``
with the op and the reason, counted as the op's failure, never a duplicate of anything nor anything's
original, and the other rows are deduplicated exactly as if it were not in the input -- in the
single-process global step and in the sharded one, for 1, 3 and 7 partitions and 1, 3 and 7 key
shards; with ``dedup_history`` it is never looked up, and the tracer never pairs it.  Without
``skip_op_error`` the job fails naming the row.  Real jobs in this process, no Ray;
the kernel's failure is simulated on the rows whose text holds a marker word.
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_provider_dj.engine import run_job
from airflow_provider_dj.engine.execution import global_shards
from airflow_provider_dj.engine.execution.key_rows import UnkeyableRowError, compute_keys
from airflow_provider_dj.engine.input.task_map import run_in_process
from airflow_provider_dj.engine.observe.lineage import DUPLICATE, FAILED
from airflow_provider_dj.engine.storage.global_op_state import KEY_ERROR_COLUMN
from airflow_provider_dj.ops.columns import INPUT_ROW_COLUMN
from airflow_provider_dj.ops.dedup import near
from airflow_provider_dj.ops.registry import create_op
from tests.helpers_compare import assert_same_bytes

MARKER = "UNKEYABLE"
REASON = f"RuntimeError: the shingling kernel failed on a text with {MARKER}"

OPS = {
    "document_minhash_deduplicator": "{num_permutations: 64, jaccard_threshold: 0.6}",
    "document_simhash_deduplicator": "{window_size: 3}",
}


@pytest.fixture(autouse=True)
def failing_kernel(monkeypatch):
    """The shingler (MinHash's and SimHash's kernel) raises on a text holding ``MARKER``."""
    shingles = near._Shingler.shingles

    def failing(self, text):
        if MARKER in text:
            raise RuntimeError(f"the shingling kernel failed on a text with {MARKER}")
        return shingles(self, text)

    monkeypatch.setattr(near._Shingler, "shingles", failing)


def _texts() -> list[str]:
    """21 rows: near and exact copies spanning partitions, and three unkeyable rows (3, 4, 12): row 3 is a
    near copy of row 1, row 4 the first of the texts that rows 5 and 10 copy, row 12 a near copy of 8."""
    rnd = random.Random(11)
    words = [f"w{i}" for i in range(300)]

    def text() -> str:
        return " ".join(rnd.choice(words) for _ in range(40))

    def change(t: str, at: int, word: str) -> str:
        parts = t.split()
        parts[at] = word
        return " ".join(parts)

    a, b, c, d, e = text(), text(), text(), text(), text()
    rows = [
        a,  # 0
        b,  # 1
        change(a, 20, "x1"),  # 2: near a
        change(b, 30, MARKER),  # 3: near b, unkeyable
        change(c, 10, MARKER),  # 4: first of c, unkeyable
        change(c, 25, "x2"),  # 5: near c: kept, its original (4) is unkeyable
        d,  # 6
        d,  # 7: exact copy of 6
        e,  # 8
        text(),  # 9
        c,  # 10: c itself: a near copy of 5
        text(),  # 11
        f"{MARKER} {e}",  # 12: near e, unkeyable
    ]
    rows += [text() for _ in range(21 - len(rows))]
    return rows


#: The rows each op keeps: those of the input without the unkeyable rows (checked against such a run below).
KEPT = [0, 1, 5, 6, 8, 9, 11, 13, 14, 15, 16, 17, 18, 19, 20]
UNKEYABLE = [3, 4, 12]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("near_key_failures")
    texts = _texts()
    (root / "rows.jsonl").write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in enumerate(texts)))
    (root / "keyable.jsonl").write_text(
        "".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in enumerate(texts) if i not in UNKEYABLE)
    )
    return root


def _run(tmp_path, monkeypatch, corpus, op, name, partitions, shards=0, skip=True, data="rows.jsonl"):
    monkeypatch.setenv("DJ_GLOBAL_STEP_SHARDS", str(shards))
    monkeypatch.setattr(global_shards, "default_task_runner", lambda: run_in_process)
    recipe = tmp_path / f"{name}.yaml"
    recipe.write_text(
        f"project_name: {name}\ndataset_path: {corpus / data}\nexport_path: {tmp_path / name}.jsonl\n"
        f"work_dir: {tmp_path / 'work'}\nskip_op_error: {str(skip).lower()}\n"
        f"partition:\n  mode: manual\n  num_of_partitions: {partitions}\n"
        f"process:\n  - {op}: {OPS[op]}\n"
    )
    return run_job(str(recipe), workers=1, job_id=name)


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("op", sorted(OPS))
def test_unkeyable_rows_fail_alone_whatever_the_partitions_and_shards(tmp_path, monkeypatch, corpus, op) -> None:
    texts = _texts()
    _run(tmp_path, monkeypatch, corpus, op, "keyable", 1, data="keyable.jsonl")
    assert [r["id"] for r in _jsonl(tmp_path / "keyable.jsonl")] == KEPT
    want = (tmp_path / "keyable.jsonl").read_bytes()
    for partitions, shards in ((1, 0), (3, 0), (7, 0), (7, 1), (7, 3), (3, 7)):
        name = f"p{partitions}_s{shards}"
        _run(tmp_path, monkeypatch, corpus, op, name, partitions, shards)
        assert_same_bytes((tmp_path / f"{name}.jsonl").read_bytes(), want, name)
        job = tmp_path / "work" / name
        failed = [r for f in sorted((job / "failed").rglob("*.jsonl")) for r in _jsonl(f)]
        assert [{k: v for k, v in r.items() if k != "__dj__partition__"} for r in failed] == [
            {
                "id": i,
                "text": texts[i],
                INPUT_ROW_COLUMN: i,
                "__dj__error_type__": "RuntimeError",
                "__dj__error__": REASON,
                "__dj__failed_op__": op,
                "__dj__failed_op_index__": 0,
            }
            for i in UNKEYABLE
        ], name
        lineage = pa.concat_tables(
            [pq.read_table(f) for f in sorted((job / "lineage").rglob("*.parquet"))], promote_options="permissive"
        )
        fate = dict(zip(lineage.column("input_row").to_pylist(), lineage.column("fate").to_pylist()))
        assert sorted(r for r, f in fate.items() if f == FAILED) == UNKEYABLE, name
        dup_of = {
            r: d for r, f, d in zip(fate, fate.values(), lineage.column("dup_of_row").to_pylist()) if f == DUPLICATE
        }
        # 2 repeats 0, 7 repeats 6, 10 repeats 5 (not the unkeyable 4); nothing repeats 3, 4 or 12.
        assert dup_of == {2: 0, 7: 6, 10: 5}, name
        summary = json.loads((job / "job_summary.json").read_text())
        assert '"failed": 3' in json.dumps(summary), name


@pytest.mark.parametrize("op", sorted(OPS))
def test_without_skip_op_error_the_job_fails_naming_the_row(tmp_path, monkeypatch, corpus, op) -> None:
    with pytest.raises(Exception, match=f"{op}: cannot compute the key of input row 3: {REASON}"):
        _run(tmp_path, monkeypatch, corpus, op, "strict", 1, skip=False)
    assert not (tmp_path / "strict.jsonl").exists()


@pytest.mark.parametrize("op", sorted(OPS))
def test_key_phase_keys_an_unkeyable_row_null(op) -> None:
    """Its signatures are null with the reason beside them; the other rows' are the kernel's own."""
    texts = _texts()
    table = pa.table({"text": texts, INPUT_ROW_COLUMN: pa.array(range(len(texts)), pa.int64())})
    impl = create_op(op, {})
    keys = compute_keys(impl, table, [(0, 9), (9, 12)], skip_op_error=True)
    assert keys.schema.names == impl.signature_schema().names + [KEY_ERROR_COLUMN]
    errors = keys.column(KEY_ERROR_COLUMN).to_pylist()
    assert [i for i, e in enumerate(errors) if e is not None] == UNKEYABLE
    assert {errors[i] for i in UNKEYABLE} == {REASON}
    signed = [i for i in range(len(texts)) if i not in UNKEYABLE]
    for name in impl.signature_schema().names:
        assert keys.column(name).is_null().to_pylist() == [e is not None for e in errors]
    good = table.take(signed)
    assert keys.drop_columns([KEY_ERROR_COLUMN]).take(signed).equals(impl.compute_hash(good))
    # Each kept row is the lowest of its cluster among the signed rows; an unkeyed row represents itself.
    rep = impl.duplicate_representatives([keys.slice(0, 5), keys.slice(5)])
    alone = impl.duplicate_representatives([impl.compute_hash(good)])
    assert rep[UNKEYABLE].tolist() == UNKEYABLE
    assert rep[signed].tolist() == np.asarray(signed)[alone].tolist()
    with pytest.raises(UnkeyableRowError, match=f"input row 3: {REASON}") as ei:
        compute_keys(impl, table, [(0, 21)], skip_op_error=False)
    assert isinstance(ei.value.__cause__, RuntimeError)


def test_unkeyable_rows_are_never_history_duplicates_nor_traced(tmp_path, monkeypatch, corpus) -> None:
    """``dedup_history`` and the tracer on MinHash: night 1 exports rows 0-9; night 2 reads all 21 rows, so its
    kept rows among 0-9 are history duplicates, its unkeyable ones (3 a near copy of exported 1, 4) only failed;
    the one-process and the sharded step write the same export, history duplicates and trace."""
    op = "document_minhash_deduplicator"
    lines = (corpus / "keyable.jsonl").read_text().splitlines(keepends=True)
    (tmp_path / "night1.jsonl").write_text("".join(line for line in lines if json.loads(line)["id"] < 10))
    extra = f"open_tracer: true\ntrace_num: 5\ndedup_history:\n  path: {{history}}\n  ops: [{op}]\n"
    jobs = {}
    for name, data, shards, history in (
        ("n1", tmp_path / "night1.jsonl", 0, "hist_a"),
        ("n2_single", corpus / "rows.jsonl", 0, "hist_a"),
        ("n2_k7", corpus / "rows.jsonl", 7, "hist_b"),
    ):
        if name == "n2_single":
            shutil.copytree(tmp_path / "hist_a", tmp_path / "hist_b")
        monkeypatch.setenv("DJ_GLOBAL_STEP_SHARDS", str(shards))
        monkeypatch.setattr(global_shards, "default_task_runner", lambda: run_in_process)
        recipe = tmp_path / f"{name}.yaml"
        recipe.write_text(
            f"project_name: {name}\ndataset_path: {data}\nexport_path: {tmp_path / name}.jsonl\n"
            f"work_dir: {tmp_path / 'work'}\nskip_op_error: true\n"
            "partition:\n  mode: manual\n  num_of_partitions: 3\n"
            f"process:\n  - {op}: {OPS[op]}\n" + extra.format(history=tmp_path / history)
        )
        jobs[name] = Path(run_job(str(recipe), workers=1, job_id=name).job_dir)
    assert [r["id"] for r in _jsonl(tmp_path / "n1.jsonl")] == [0, 1, 5, 6, 8, 9]
    assert [r["id"] for r in _jsonl(tmp_path / "n2_single.jsonl")] == [i for i in KEPT if i >= 10]
    assert_same_bytes((tmp_path / "n2_k7.jsonl").read_bytes(), (tmp_path / "n2_single.jsonl").read_bytes())
    rel = f"dedup_history/op_000_{op}.parquet"
    history = pq.read_table(jobs["n2_single"] / rel)
    assert history.column(INPUT_ROW_COLUMN).to_pylist() == [0, 1, 5, 6, 8, 9]
    assert pq.read_table(jobs["n2_k7"] / rel).equals(history)
    trace = f"trace/duplicate-{op}.jsonl"
    assert_same_bytes((jobs["n2_k7"] / trace).read_bytes(), (jobs["n2_single"] / trace).read_bytes(), "trace")
    traced = [json.loads(line) for line in (jobs["n2_single"] / trace).read_text().splitlines()]
    in_night = [(e["dup1"]["id"], e["dup2"]["id"]) for e in traced if not e.get("history_duplicate")]
    assert in_night == [(0, 2), (6, 7), (5, 10)], traced  # 10 is traced against 5, not the unkeyable 4
    assert not {e["dup2"]["id"] for e in traced} & set(UNKEYABLE), traced
    for job in (jobs["n2_single"], jobs["n2_k7"]):
        failed = [r["id"] for f in sorted((job / "failed").rglob("*.jsonl")) for r in _jsonl(f)]
        assert failed == UNKEYABLE
