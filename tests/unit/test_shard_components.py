"""The sharded connected components (engine/execution/shard_components.py) against the in-memory reference.

Each case writes real Arrow edge files, runs every round with files under tmp_path and compares the exact
node -> rep pairs of each shard with ``ops.dedup.near.min_label_components``; the resume cases crash a
run after some tasks and check that the rerun redoes only what was not committed and writes the same bytes.
"""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pytest

from airflow_provider_dj.engine.execution import shard_components as sc
from airflow_provider_dj.engine.input.task_map import run_in_process
from airflow_provider_dj.ops.dedup.near import min_label_components
from tests.helpers_compare import assert_same_bytes


def _positions(rng: np.random.Generator, count: int, partitions: int) -> np.ndarray:
    part = rng.integers(0, partitions, count, dtype=np.int64)
    row = rng.integers(0, 1 << 20, count, dtype=np.int64)
    return np.unique((part << 32) | row)


def _write_inputs(folder, u, v, partitions: int, shards: int, seed: int = 0) -> list[list[str]]:
    """Edges filed by their u's shard, in two files per shard (one of them sometimes empty), several batches."""
    rng = np.random.default_rng(seed)
    os.makedirs(folder, exist_ok=True)
    shard_of = sc.node_shard(u, partitions, shards)
    inputs = []
    for r in range(shards):
        mine = np.flatnonzero(shard_of == r)
        cut = int(rng.integers(0, len(mine) + 1))
        paths = []
        for i, part in enumerate((mine[:cut], mine[cut:])):
            path = os.path.join(folder, f"in_{r}_{i}.arrow")
            table = pa.table({"u": u[part], "v": v[part]}, schema=pa.schema([("u", pa.int64()), ("v", pa.int64())]))
            with pa.ipc.new_file(path, table.schema) as writer:
                for batch in table.to_batches(max_chunksize=max(1, len(part) // 3 + 1)):
                    writer.write_batch(batch)
            paths.append(path)
        inputs.append(paths)
    return inputs


def _expected(u: np.ndarray, v: np.ndarray, partitions: int, shards: int) -> list[tuple[np.ndarray, np.ndarray]]:
    nodes, compact = np.unique(np.r_[u, v], return_inverse=True)
    labels = min_label_components(len(nodes), compact[: len(u)], compact[len(u) :])
    rep = nodes[labels]
    listed = rep < nodes
    node, rep = nodes[listed], rep[listed]
    shard_of = sc.node_shard(node, partitions, shards)
    return [(node[shard_of == r], rep[shard_of == r]) for r in range(shards)]


def _read_result(path: str) -> tuple[np.ndarray, np.ndarray]:
    table = pa.ipc.open_file(path).read_all()
    assert table.schema.names == ["node", "rep"]
    return table.column("node").to_numpy(), table.column("rep").to_numpy()


def _run(tmp_path, u, v, partitions: int, shards: int, run_tasks=run_in_process, name: str = "cc") -> list[str]:
    inputs = _write_inputs(str(tmp_path / f"{name}_in"), u, v, partitions, shards)
    return sc.sharded_components(
        str(tmp_path / name), inputs, partitions=partitions, shards=shards, run_tasks=run_tasks
    )


def _assert_components(paths: list[str], u, v, partitions: int, shards: int) -> None:
    assert len(paths) == shards
    for r, (path, (node, rep)) in enumerate(zip(paths, _expected(u, v, partitions, shards))):
        got_node, got_rep = _read_result(path)
        np.testing.assert_array_equal(got_node, node, err_msg=f"shard {r}: nodes")
        np.testing.assert_array_equal(got_rep, rep, err_msg=f"shard {r}: reps")


def _random_graph(seed: int, partitions: int, nodes: int = 600, edges: int = 500):
    rng = np.random.default_rng(seed)
    pos = _positions(rng, nodes, partitions)
    u = pos[rng.integers(0, len(pos), edges)]
    v = pos[rng.integers(0, len(pos), edges)]
    return u, v


def test_node_shard_splits_partitions_by_range():
    nodes = (np.arange(10, dtype=np.int64) << 32) | 7
    np.testing.assert_array_equal(sc.node_shard(nodes, 10, 3), [0, 0, 0, 0, 1, 1, 1, 2, 2, 2])
    assert sc.node_shard(nodes, 10, 3).dtype == np.int64


@pytest.mark.parametrize("shards", [1, 3, 7])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_graphs_match_the_in_memory_components(tmp_path, seed, shards):
    partitions = 5 + seed * 3
    u, v = _random_graph(seed, partitions)
    paths = _run(tmp_path, u, v, partitions, shards)
    _assert_components(paths, u, v, partitions, shards)
    for r, path in enumerate(paths):
        node, rep = _read_result(path)
        assert (rep < node).all()
        assert (sc.node_shard(node, partitions, shards) == r).all()


def test_a_long_path_with_shuffled_ids_converges(tmp_path, caplog):
    rng = np.random.default_rng(7)
    partitions, shards = 8, 3
    pos = rng.permutation(_positions(rng, 2500, partitions)[:2000])
    u, v = pos[:-1], pos[1:]
    with caplog.at_level("INFO", logger=sc.__name__):
        paths = _run(tmp_path, u, v, partitions, shards)
    _assert_components(paths, u, v, partitions, shards)
    rounds = [rec for rec in caplog.records if "round" in rec.getMessage() and "edges in" in rec.getMessage()]
    assert 3 <= len(rounds) <= 2 * 20 + 1, [rec.getMessage() for rec in rounds]
    node = np.concatenate([_read_result(p)[0] for p in paths])
    rep = np.concatenate([_read_result(p)[1] for p in paths])
    np.testing.assert_array_equal(np.sort(node), np.sort(pos)[1:])
    assert (rep == pos.min()).all()


def test_a_big_star_and_separate_pairs(tmp_path):
    rng = np.random.default_rng(3)
    partitions, shards = 6, 7
    pos = rng.permutation(_positions(rng, 3000, partitions))
    centre, leaves = pos[0], pos[1:2001]
    pairs = pos[2001:2401].reshape(-1, 2)
    u = np.r_[np.full(len(leaves), centre), pairs[:, 0]]
    v = np.r_[leaves, pairs[:, 1]]
    paths = _run(tmp_path, u, v, partitions, shards)
    _assert_components(paths, u, v, partitions, shards)


def test_empty_input_gives_empty_shards(tmp_path):
    empty = np.empty(0, np.int64)
    paths = _run(tmp_path, empty, empty, 4, 3)
    for path in paths:
        node, rep = _read_result(path)
        assert node.tolist() == [] and rep.tolist() == []


def test_duplicate_reversed_and_self_loop_edges(tmp_path):
    a, b, c, d, e = (0 << 32) | 5, (1 << 32) | 2, (2 << 32) | 9, (3 << 32) | 1, (3 << 32) | 4
    u = np.array([b, a, a, b, c, c, d, e, e, d, e], dtype=np.int64)
    v = np.array([a, b, b, a, b, c, e, d, d, e, e], dtype=np.int64)
    paths = _run(tmp_path, u, v, 4, 3)
    got = {}
    for path in paths:
        node, rep = _read_result(path)
        got.update(zip(node.tolist(), rep.tolist()))
    assert got == {b: a, c: a, e: d}
    _assert_components(paths, u, v, 4, 3)


class _Crash(Exception):
    pass


def _crashing_after(limit: int):
    """A run_tasks that runs tasks in process and raises once ``limit`` tasks have run (across calls)."""
    ran = [0]

    def run_tasks(fn, args_list):
        out = []
        for args in args_list:
            if ran[0] >= limit:
                raise _Crash(f"simulated crash after {limit} tasks")
            out.append(fn(*args))
            ran[0] += 1
        return out

    return run_tasks


def _stats(folder: str) -> dict[str, tuple[int, int]]:
    out = {}
    for root, _dirs, files in os.walk(folder):
        for name in files:
            st = os.stat(os.path.join(root, name))
            out[os.path.relpath(os.path.join(root, name), folder)] = (st.st_ino, st.st_mtime_ns)
    return out


@pytest.mark.parametrize("crash_after", [2, 5, 11])
def test_resume_after_a_crash_redoes_only_uncommitted_tasks(tmp_path, monkeypatch, crash_after):
    partitions, shards = 7, 3
    u, v = _random_graph(11, partitions, nodes=400, edges=380)
    clean = _run(tmp_path, u, v, partitions, shards, name="clean")

    inputs = _write_inputs(str(tmp_path / "crash_in"), u, v, partitions, shards)
    folder = str(tmp_path / "crash")
    with pytest.raises(_Crash):
        sc.sharded_components(
            folder, inputs, partitions=partitions, shards=shards, run_tasks=_crashing_after(crash_after)
        )
    before = _stats(folder)
    committed = {p for p in before if p.endswith(".json")}
    assert len(committed) == crash_after
    if crash_after == 5:  # a task that crashed between its outputs and its commit: outputs present, no done file
        os.remove(os.path.join(folder, sorted(committed)[-1]))
        committed = set(sorted(committed)[:-1])

    computed = []
    real_write = sc._write_outputs
    monkeypatch.setattr(sc, "_write_outputs", lambda f, k, s, *a: (computed.append((k, s)), real_write(f, k, s, *a)))
    paths = sc.sharded_components(folder, inputs, partitions=partitions, shards=shards, run_tasks=run_in_process)

    after = _stats(folder)
    committed_outputs = {
        p for p in before if p.endswith(".arrow") and f"{p.split(os.sep)[0]}/done/task_{p[-8:-6]}.json" in committed
    }
    assert committed_outputs, "the crash left no committed outputs to check"
    for p in committed | committed_outputs:
        assert after[p] == before[p], f"{p} was rewritten"
    redone = {(int(p[6:10]), int(p[-7:-5])) for p in committed}
    assert not redone & set(computed), "a committed task ran again"
    for got, want in zip(paths, clean):
        with open(got, "rb") as fh_got, open(want, "rb") as fh_want:
            assert_same_bytes(fh_got.read(), fh_want.read(), f"{got} differs from a run without a crash")
    _assert_components(paths, u, v, partitions, shards)


def test_a_finished_result_returns_without_running_a_task(tmp_path):
    partitions, shards = 4, 3
    u, v = _random_graph(5, partitions, nodes=200, edges=150)
    inputs = _write_inputs(str(tmp_path / "in"), u, v, partitions, shards)
    folder = str(tmp_path / "cc")
    first = sc.sharded_components(folder, inputs, partitions=partitions, shards=shards, run_tasks=run_in_process)
    before = _stats(folder)

    def no_tasks(fn, args_list):
        raise AssertionError(f"run_tasks was called with {fn.__name__}")

    again = sc.sharded_components(folder, inputs, partitions=partitions, shards=shards, run_tasks=no_tasks)
    assert again == first
    assert _stats(folder) == before


def test_a_round_already_committed_is_replayed_from_its_summaries(tmp_path):
    partitions, shards = 4, 3
    u, v = _random_graph(6, partitions, nodes=200, edges=150)
    inputs = _write_inputs(str(tmp_path / "in"), u, v, partitions, shards)
    folder = str(tmp_path / "cc")
    paths = sc.sharded_components(folder, inputs, partitions=partitions, shards=shards, run_tasks=run_in_process)
    os.remove(paths[1])  # one result shard lost: the rounds replay, only that shard is written again
    before = _stats(folder)
    calls = []

    def counting(fn, args_list):
        calls.append((fn.__name__, len(args_list)))
        return run_in_process(fn, args_list)

    sc.sharded_components(folder, inputs, partitions=partitions, shards=shards, run_tasks=counting)
    after = _stats(folder)
    changed = sorted(p for p in after if before.get(p) != after[p])
    assert changed == [os.path.join("result", "shard_01.arrow")]
    assert calls[-1] == ("component_result_task", shards)
    _assert_components(paths, u, v, partitions, shards)


def test_a_node_outside_the_partitions_is_refused(tmp_path):
    u = np.array([(9 << 32) | 1], dtype=np.int64)
    v = np.array([(0 << 32) | 1], dtype=np.int64)
    inputs = [[], [], []]
    inputs[0] = _write_inputs(str(tmp_path / "in"), v, u, 4, 3)[0]
    with pytest.raises(ValueError, match="outside the 4 partitions"):
        sc.sharded_components(str(tmp_path / "cc"), inputs, partitions=4, shards=3, run_tasks=run_in_process)


def test_edge_inputs_must_have_one_list_per_shard(tmp_path):
    with pytest.raises(ValueError, match="one list per shard"):
        sc.sharded_components(str(tmp_path), [[]], partitions=2, shards=2, run_tasks=run_in_process)


def test_too_many_passes_raise_naming_the_folder(tmp_path, monkeypatch):
    monkeypatch.setattr(sc, "MAX_PASSES", 1)
    pos = (np.arange(64, dtype=np.int64) % 2 << 32) | np.arange(64)
    pos = np.random.default_rng(2).permutation(pos)
    with pytest.raises(RuntimeError, match="did not converge in 1 Large-Star") as info:
        _run(tmp_path, pos[:-1], pos[1:], 2, 2)
    assert str(tmp_path / "cc") in str(info.value)
