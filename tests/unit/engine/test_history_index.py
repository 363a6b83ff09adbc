"""The history index (engine/history/index.py): commit, pin, compare-and-swap, crash safety, streaming."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from airflow_provider_dj.engine.history.index import HistoryIndex, HistoryIndexError, OpAdditions

OP = "document_deduplicator"
ARGS = {"lowercase": True, "ignore_non_character": False}


def _keys(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 2**63, n, dtype=np.uint64), rng.integers(0, 2**63, n, dtype=np.uint64)


def _add(k0, k1) -> dict:
    return {OP: OpAdditions(ARGS, k0, k1, np.arange(len(k0)))}


def test_commit_then_lookup_names_job_and_export_row(tmp_path):
    idx = HistoryIndex(str(tmp_path / "h"))
    assert idx.current_version() == 0
    k0, k1 = _keys(5000, 1)
    r = idx.commit(job_id="night1", pinned=0, export_path="/x/n1.jsonl", additions=_add(k0, k1))
    assert (r.status, r.version, r.added) == ("committed", 1, {OP: 5000})
    n0, n1 = _keys(300, 2)
    q0 = np.concatenate([n0, k0[[7, 4999, 0]]])
    q1 = np.concatenate([n1, k1[[7, 4999, 0]]])
    q1_wrong = q1.copy()
    q1_wrong[-1] ^= np.uint64(1)  # same first word, other second word: not a match
    job, row = idx.lookup(1, OP, q0, q1, memory_bytes=1 << 16)
    assert (job[:300] == -1).all() and job[300:].tolist() == [0, 0, 0] and row[300:].tolist() == [7, 4999, 0]
    job, _ = idx.lookup(1, OP, q0, q1_wrong, memory_bytes=1 << 16)
    assert job[-1] == -1 and job[-2] == 0
    # The version a job pinned keeps answering as it did: version 0 holds nothing.
    assert (idx.lookup(0, OP, q0, q1, memory_bytes=1 << 16)[0] == -1).all()


def test_second_version_is_copy_on_write_and_a_retried_commit_adds_nothing(tmp_path):
    idx = HistoryIndex(str(tmp_path / "h"))
    a0, a1 = _keys(1000, 3)
    b0, b1 = _keys(1000, 4)
    idx.commit(job_id="n1", pinned=0, export_path="e1", additions=_add(a0, a1))
    v1_files = sorted(os.listdir(tmp_path / "h" / "versions" / "v000001" / OP))
    r = idx.commit(job_id="n2", pinned=1, export_path="e2", additions=_add(b0, b1))
    assert r.version == 2
    m2 = idx.manifest(2)
    files = [f["file"] for shards in m2["ops"][OP]["shards"].values() for f in shards]
    assert sum(f.startswith("versions/v000001/") for f in files) == len(v1_files)  # referenced, not copied
    assert all(f.startswith(("versions/v000001/", "versions/v000002/")) for f in files)
    assert m2["ops"][OP]["entries"] == 2000 and [j["job_id"] for j in m2["jobs"]] == ["n1", "n2"]
    again = idx.commit(job_id="n2", pinned=1, export_path="e2", additions=_add(b0, b1))
    assert (again.status, again.version, idx.current_version()) == ("already_committed", 2, 2)
    job, row = idx.lookup(2, OP, np.array([a0[5], b0[6]]), np.array([a1[5], b1[6]]), memory_bytes=1 << 20)
    assert job.tolist() == [0, 1] and row.tolist() == [5, 6]


def test_commit_racing_another_job_builds_on_the_newest_and_loses_nothing(tmp_path):
    idx = HistoryIndex(str(tmp_path / "h"))
    a0, a1 = _keys(100, 5)
    b0, b1 = _keys(100, 6)
    idx.commit(job_id="jobA", pinned=0, export_path="a", additions=_add(a0, a1))
    r = idx.commit(job_id="jobB", pinned=0, export_path="b", additions=_add(b0, b1))  # also pinned 0
    assert (r.version, r.base, r.pinned) == (2, 1, 0) and "another job" in r.note
    job, _ = idx.lookup(2, OP, np.concatenate([a0, b0]), np.concatenate([a1, b1]), memory_bytes=1 << 20)
    assert (job[:100] == 0).all() and (job[100:] == 1).all()


def test_crash_before_current_moves_leaves_the_old_version_and_the_next_commit_succeeds(tmp_path):
    idx = HistoryIndex(str(tmp_path / "h"))
    a0, a1 = _keys(100, 7)
    idx.commit(job_id="n1", pinned=0, export_path="a", additions=_add(a0, a1))
    b0, b1 = _keys(100, 8)

    def crash():
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError, match="killed"):
        idx.commit(job_id="n2", pinned=1, export_path="b", additions=_add(b0, b1), before_current_moves=crash)
    assert idx.current_version() == 1 and idx.committed_by("n2") is None
    assert (idx.lookup(1, OP, b0, b1, memory_bytes=1 << 20)[0] == -1).all()
    assert os.path.exists(tmp_path / "h" / "versions" / "v000002" / "manifest.json")  # orphan, never referenced
    r = idx.commit(job_id="n2", pinned=1, export_path="b", additions=_add(b0, b1))
    assert (r.status, r.version) == ("committed", 2)
    assert (idx.lookup(2, OP, b0, b1, memory_bytes=1 << 20)[0] == 1).all()
    assert idx.manifest(2)["ops"][OP]["entries"] == 200


def test_lookup_streams_in_chunks_within_the_budget(tmp_path, monkeypatch):
    idx = HistoryIndex(str(tmp_path / "h"))
    k0, k1 = _keys(200_000, 9)
    idx.commit(job_id="n1", pinned=0, export_path="a", additions=_add(k0, k1))
    seen = []
    real = np.fromfile

    def spy(fh, dtype, count):
        out = real(fh, dtype=dtype, count=count)
        seen.append(out.nbytes)
        return out

    monkeypatch.setattr(np, "fromfile", spy)
    budget = 8 << 10
    job, row = idx.lookup(1, OP, k0[::97], k1[::97], memory_bytes=budget)
    assert (job == 0).all() and (row == np.arange(0, 200_000, 97)).all()
    assert max(seen) <= budget and len(seen) > 3 * 256  # many chunks, none over the budget


def test_damaged_shard_and_other_op_arguments_are_refused(tmp_path):
    idx = HistoryIndex(str(tmp_path / "h"))
    k0, k1 = _keys(1000, 10)
    idx.commit(job_id="n1", pinned=0, export_path="a", additions=_add(k0, k1))
    with pytest.raises(HistoryIndexError, match="lowercase"):
        idx.check_key_args(1, OP, {"lowercase": False, "ignore_non_character": False})
    idx.check_key_args(1, OP, dict(ARGS))
    shard = next(iter(idx.manifest(1)["ops"][OP]["shards"].values()))[0]["file"]
    path = tmp_path / "h" / shard
    data = bytearray(path.read_bytes())
    data[20] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(HistoryIndexError, match="does not match its manifest"):
        idx.lookup(1, OP, k0, k1, memory_bytes=1 << 20)
    (tmp_path / "h" / "CURRENT").write_text(json.dumps({"version": 1}))
    assert idx.current_version() == 1


def _commit_many(path: str, who: int, times: int) -> None:
    idx = HistoryIndex(path)
    for t in range(times):
        k0, k1 = _keys(50, 100 * who + t)
        idx.commit(job_id=f"j{who}-{t}", pinned=0, export_path="e", additions=_add(k0, k1))


def test_two_processes_committing_at_once_lose_no_entry(tmp_path):
    import multiprocessing

    path = str(tmp_path / "h")
    ctx = multiprocessing.get_context("fork")  # the test process has imported everything already
    procs = [ctx.Process(target=_commit_many, args=(path, who, 10)) for who in (1, 2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0]
    idx = HistoryIndex(path)
    assert idx.current_version() == 20
    m = idx.manifest(20)
    assert sorted(j["job_id"] for j in m["jobs"]) == sorted(f"j{w}-{t}" for w in (1, 2) for t in range(10))
    assert m["ops"][OP]["entries"] == 1000
    for who in (1, 2):
        for t in range(10):
            k0, k1 = _keys(50, 100 * who + t)
            assert (idx.lookup(20, OP, k0, k1, memory_bytes=1 << 20)[0] >= 0).all()
