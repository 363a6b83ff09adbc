"""Connected components of the near-duplicate graph, sharded: bounded memory per task, resumable by round.

Why: a deduplicator's global step needs, for every row with a near-duplicate, the smallest row of its
connected component (its "rep": the row kept is the component's first occurrence in input order).  The
in-memory union-find (``ops/dedup/near.min_label_components``) holds every edge in one process; here
no task holds more than its own node shard's edges, so the graph can be larger than any one worker.

Contract.  Nodes are int64 positions ``(partition_index << 32) | local_row`` (numeric order is input
order).  Edges and nodes are split into ``shards`` node shards by partition range: ``node_shard``.
``sharded_components(folder, edge_inputs, partitions=P, shards=R, run_tasks=...)`` reads
``edge_inputs[r]`` (Arrow IPC *file* format paths with int64 columns ``u``, ``v``, edges whose ``u`` lies
in shard ``r``; orientation, duplicates and self-loops arbitrary) and returns, per node shard, the path of
a file with columns ``node``, ``rep`` (int64) for every node with ``rep < node``, sorted by node.  A node
without an edge, and a component's minimum, are not listed.

Algorithm: alternating Large-Star and Small-Star (Kiveris et al., "Connected Components in MapReduce and
Beyond", 2014) with node ids as labels.  Large-Star: each node ``u`` sees all its neighbours ``G(u)``
and links every larger neighbour to ``m = min(G(u) + {u})``.  Small-Star: each node ``u`` sees its
smaller neighbours ``N`` and links ``N + {u}`` to ``m = min(N + {u})``.  Self-loops and duplicates are
dropped.  The components never change; a Large-Star + Small-Star pass that leaves the (undirected,
deduplicated) edge set unchanged means every component is a star around its minimum, so each non-minimum
node has exactly one edge, to its rep.  That takes O(log n) passes in practice (O(log^2 n) proven).

Rounds.  Round 0 ("scatter") reads the inputs, drops self-loops and duplicates and sends each edge to
both endpoints' shards; then odd rounds are Large-Star and even rounds Small-Star.  A round is one task
per node shard: task ``r`` reads its inbox (the files the previous round sent to shard ``r``), computes
its step with numpy (sorts and group boundaries, no Python loop per edge) and writes one file per
destination shard.  A task holds its inbox and its outputs, nothing else.  Large-Star's inbox holds
every edge under both endpoints (``<u;v>`` at ``u``'s shard, ``<v;u>`` at ``v``'s); Small-Star's holds
each edge once, as ``<max;min>`` at the larger endpoint's shard.  Tasks get paths and small values only
and return a small summary, so ``run_tasks`` may run them as Ray tasks in other processes.

Convergence.  Each task returns the count and an order-independent 64-bit hash (the sum mod 2**64 of a
mixed ``(min, max)``) of the unique undirected edges of its inbox (a Large-Star inbox counts ``<u;v>``
with ``u < v`` only, so each edge is counted once over all shards) and of those it emitted.  The
orchestrator sums them over the round and calls the step unchanged when output and input agree.  Two
tasks may emit the same edge, so the summed output is a multiset; it can equal the input set only when
there are no such repeats and the sets are equal (up to a 2**-64 hash collision), and at the fixpoint a
star's edges are emitted by one task each, so the test is exact where it matters.  A pass whose two steps
are both unchanged ends the loop; the result round then lists ``<node;rep>`` per shard.  More than
``MAX_PASSES`` passes raises RuntimeError naming the folder (no infinite loop).

Layout inside ``folder`` (every file written with ``fs.atomic_write_bytes``: absent or complete)::

    round_0000/                 round k's outputs (round 0: scatter, odd: large-star, even: small-star)
      to_02/from_05.arrow       edges task 5 of round k sent to shard 2: round k+1's task 2 reads to_02/*
      done/task_05.json         task 5's summary, written after all its outputs: the task's commit
    result/shard_02.arrow       node, rep for shard 2's nodes with rep < node, sorted by node

Resume.  A task whose ``done`` file exists returns the summary stored there and writes nothing, so a
rerun after a crash (any subset of a round's files present) replays the rounds from their summaries and
recomputes only the tasks without one; rounds are deterministic, so a redone task writes identical
bytes.  When every result file exists, ``sharded_components`` returns them without running a task.
The folder belongs to one graph: a different input needs a different (or emptied) folder.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import numpy as np
import pyarrow as pa

from airflow_provider_dj.core import fs
from airflow_provider_dj.engine.input.task_map import RunTasks

log = logging.getLogger(__name__)

#: Large-Star + Small-Star passes before giving up (each pass is two rounds); O(log n) needs far fewer.
MAX_PASSES = 64
SCATTER, LARGE_STAR, SMALL_STAR = "scatter", "large-star", "small-star"
_EDGE_SCHEMA = pa.schema([("u", pa.int64()), ("v", pa.int64())])
#: Schema metadata of a file whose rows are sorted by their first column (the results by ``node``, a key
#: shard's edges by ``u``): a partition's rows are one range of it, found by binary search.
SORTED_BY_FIRST = {b"sorted_by_first": b"1"}
_RESULT_SCHEMA = pa.schema([("node", pa.int64()), ("rep", pa.int64())], metadata=SORTED_BY_FIRST)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


def node_shard(nodes: np.ndarray, partitions: int, shards: int) -> np.ndarray:
    """Node shard of each encoded position: ((nodes >> 32) * shards) // partitions, as int64."""
    return ((np.asarray(nodes, dtype=np.int64) >> 32) * shards) // partitions


# --- paths ------------------------------------------------------------------
def _round_dir(folder: str, round_index: int) -> str:
    return fs.join(folder, f"round_{round_index:04d}")


def _out_path(folder: str, round_index: int, to: int, sender: int) -> str:
    return fs.join(_round_dir(folder, round_index), f"to_{to:02d}", f"from_{sender:02d}.arrow")


def _done_path(folder: str, round_index: int, task: int) -> str:
    return fs.join(_round_dir(folder, round_index), "done", f"task_{task:02d}.json")


def _inbox(folder: str, round_index: int, shard: int, shards: int) -> list[str]:
    """What round ``round_index`` sent to ``shard``: the inbox of round ``round_index + 1``'s task."""
    return [_out_path(folder, round_index, shard, sender) for sender in range(shards)]


def result_path(folder: str, shard: int) -> str:
    return fs.join(folder, "result", f"shard_{shard:02d}.arrow")


# --- edges: reading, writing, hashing ----------------------------------------
def _read_edges(paths: list[str]) -> tuple[np.ndarray, np.ndarray]:
    us, vs = [np.empty(0, np.int64)], [np.empty(0, np.int64)]
    for path in paths:
        with fs.open_read(path) as fh:
            table = pa.ipc.open_file(fh).read_all()
        if table.num_rows:
            us.append(table.column("u").to_numpy().astype(np.int64, copy=False))
            vs.append(table.column("v").to_numpy().astype(np.int64, copy=False))
    return np.concatenate(us), np.concatenate(vs)


def _arrow_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    data: bytes = sink.getvalue().to_pybytes()
    return data


def _unique_pairs(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct pairs ``(a, b)``, sorted by ``a`` then ``b``."""
    order = np.lexsort((b, a))
    a, b = a[order], b[order]
    keep = np.ones(len(a), dtype=bool)
    keep[1:] = (a[1:] != a[:-1]) | (b[1:] != b[:-1])
    return a[keep], b[keep]


def _undirected(u: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct undirected edges as ``(lo, hi)`` with ``lo < hi``: self-loops dropped."""
    keep = u != v
    u, v = u[keep], v[keep]
    return _unique_pairs(np.minimum(u, v), np.maximum(u, v))


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer, elementwise on uint64 (wrapping arithmetic)."""
    x = x ^ (x >> np.uint64(30))
    x = x * _MIX1
    x = x ^ (x >> np.uint64(27))
    x = x * _MIX2
    mixed: np.ndarray = x ^ (x >> np.uint64(31))
    return mixed


def _edge_hash(lo: np.ndarray, hi: np.ndarray) -> int:
    """Order-independent hash of a set of ``(lo, hi)`` edges: the sum mod 2**64 of a mix of each."""
    if len(lo) == 0:
        return 0
    mixed = _mix(_mix(lo.view(np.uint64) + _GOLDEN) ^ hi.view(np.uint64))
    return int(mixed.sum(dtype=np.uint64))


# --- the steps ---------------------------------------------------------------
def _group_starts(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(first index, size) of each run of equal values in sorted ``keys``."""
    if len(keys) == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
    return starts, np.diff(np.r_[starts, len(keys)])


def _large_star(key: np.ndarray, other: np.ndarray) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """Large-Star on an inbox of ``<key;other>`` (every edge under both endpoints).

    Returns (inbox edges, emitted edges), each as distinct undirected ``(lo, hi)``."""
    keep = key != other
    key, other = _unique_pairs(key[keep], other[keep])
    starts, sizes = _group_starts(key)
    # sorted by (key, other): a group's first ``other`` is its smallest neighbour
    label = np.repeat(np.minimum(key[starts], other[starts]), sizes)
    larger = other > key
    inbox = (key[larger], other[larger])
    return inbox, _unique_pairs(label[larger], other[larger])


def _small_star(key: np.ndarray, other: np.ndarray) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """Small-Star on an inbox of ``<max;min>`` (every edge once, at its larger endpoint).

    Returns (inbox edges, emitted edges), each as distinct undirected ``(lo, hi)``."""
    lo, hi = _undirected(key, other)
    order = np.lexsort((lo, hi))
    hi, lo = hi[order], lo[order]
    starts, sizes = _group_starts(hi)
    label = lo[starts]  # the smallest of a node's smaller neighbours
    per_edge = np.repeat(label, sizes)
    linked = lo != per_edge
    emitted = _unique_pairs(np.r_[per_edge[linked], label], np.r_[lo[linked], hi[starts]])
    return _unique_pairs(lo, hi), emitted


def _write_outputs(
    folder: str, round_index: int, sender: int, edges: tuple[Any, ...], both: bool, partitions: int, shards: int
) -> None:
    """Send undirected ``(lo, hi)`` edges on: under both endpoints (for Large-Star) or as ``<hi;lo>``."""
    lo, hi = edges
    keys, others = (np.r_[lo, hi], np.r_[hi, lo]) if both else (hi, lo)
    dest = node_shard(keys, partitions, shards)
    bad = (dest < 0) | (dest >= shards)
    if bad.any():
        node = int(keys[np.flatnonzero(bad)[0]])
        raise ValueError(
            f"node {node} (partition {node >> 32}, row {node & 0xFFFFFFFF}) is outside the {partitions} "
            f"partitions that sharded_components was given: pass the input's partition count"
        )
    order = np.argsort(dest, kind="stable")
    keys, others = keys[order], others[order]
    bounds = np.searchsorted(dest[order], np.arange(shards + 1))
    for to in range(shards):
        part = slice(bounds[to], bounds[to + 1])
        table = pa.table({"u": keys[part], "v": others[part]}, schema=_EDGE_SCHEMA)
        path = _out_path(folder, round_index, to, sender)
        fs.makedirs(fs.dirname(path))
        fs.atomic_write_bytes(path, _arrow_bytes(table), f"round {round_index}'s edges from {sender} to {to}")


def component_round_task(
    folder: str, round_index: int, step: str, shard: int, shards: int, partitions: int, inbox: list[str]
) -> dict[str, int]:
    """One node shard's task of one round: read its inbox, run ``step``, write one file per shard.

    Returns {in_edges, in_hash, out_edges, out_hash}; a task already committed (its ``done`` file exists)
    returns the stored summary and writes nothing."""
    done = _done_path(folder, round_index, shard)
    if fs.exists(done):
        stored: dict[str, int] = json.loads(fs.read_bytes(done))
        return stored
    key, other = _read_edges(inbox)
    if step == SCATTER:
        edges = _undirected(key, other)
        inbox_edges = edges
    elif step == LARGE_STAR:
        inbox_edges, edges = _large_star(key, other)
    elif step == SMALL_STAR:
        inbox_edges, edges = _small_star(key, other)
    else:
        raise ValueError(f"unknown step {step!r}: expected {SCATTER!r}, {LARGE_STAR!r} or {SMALL_STAR!r}")
    summary = {
        "in_edges": len(inbox_edges[0]),
        "in_hash": _edge_hash(*inbox_edges),
        "out_edges": len(edges[0]),
        "out_hash": _edge_hash(*edges),
    }
    _write_outputs(folder, round_index, shard, edges, step != LARGE_STAR, partitions, shards)
    fs.makedirs(fs.dirname(done))
    fs.atomic_write_bytes(done, json.dumps(summary, sort_keys=True).encode(), f"round {round_index}'s summary")
    return summary


def component_result_task(inbox: list[str], out_path: str) -> int:
    """A node shard's ``node, rep`` pairs from the converged edges (every edge under both endpoints).

    Returns the number of rows; an existing result file is counted, not rewritten."""
    if fs.exists(out_path):
        with fs.open_read(out_path) as fh:
            rows: int = pa.ipc.open_file(fh).read_all().num_rows
            return rows
    key, other = _read_edges(inbox)
    smaller = other < key
    node, rep = _unique_pairs(key[smaller], other[smaller])
    if len(node) > 1 and bool((node[1:] == node[:-1]).any()):
        twice = int(node[1:][node[1:] == node[:-1]][0])
        raise RuntimeError(f"node {twice} has two smaller neighbours after convergence in {out_path}'s inbox")
    table = pa.table({"node": node, "rep": rep}, schema=_RESULT_SCHEMA)
    fs.makedirs(fs.dirname(out_path))
    fs.atomic_write_bytes(out_path, _arrow_bytes(table), "a shard of the connected components")
    return len(node)


# --- the orchestrator --------------------------------------------------------
def _run_round(
    folder: str, round_index: int, step: str, inboxes: list[list[str]], partitions: int, run_tasks: RunTasks
) -> tuple[int, bool]:
    """Run one round's tasks; (edges it emitted, whether they differ from its inbox)."""
    shards = len(inboxes)
    args = [(folder, round_index, step, r, shards, partitions, list(inboxes[r])) for r in range(shards)]
    summaries = run_tasks(component_round_task, args)
    if len(summaries) != shards:
        raise RuntimeError(f"run_tasks returned {len(summaries)} results for {shards} tasks of round {round_index}")
    total = {name: sum(int(s[name]) for s in summaries) for name in ("in_edges", "in_hash", "out_edges", "out_hash")}
    changed = (total["in_edges"], total["in_hash"] % 2**64) != (total["out_edges"], total["out_hash"] % 2**64)
    log.info(
        "connected components in %s: round %d (%s): %d edges in, %d out, %s",
        folder,
        round_index,
        step,
        total["in_edges"],
        total["out_edges"],
        "changed" if changed else "unchanged",
    )
    return total["out_edges"], changed


def _converge(folder: str, edge_inputs: list[list[str]], partitions: int, run_tasks: RunTasks) -> int:
    """Run the rounds until a Large-Star + Small-Star pass changes nothing; the last round's index."""
    shards = len(edge_inputs)
    _run_round(folder, 0, SCATTER, edge_inputs, partitions, run_tasks)
    round_index = 0
    for _ in range(MAX_PASSES):
        changes = []
        for step in (LARGE_STAR, SMALL_STAR):
            inboxes = [_inbox(folder, round_index, r, shards) for r in range(shards)]
            round_index += 1
            changes.append(_run_round(folder, round_index, step, inboxes, partitions, run_tasks)[1])
        if not any(changes):
            return round_index
    raise RuntimeError(
        f"connected components in {folder} did not converge in {MAX_PASSES} Large-Star + Small-Star passes "
        f"({round_index} rounds); the folder may hold rounds of a different graph: empty it and run again"
    )


def sharded_components(
    folder: str,
    edge_inputs: list[list[str]],
    *,
    partitions: int,
    shards: int,
    run_tasks: RunTasks,
) -> list[str]:
    """Connected components of the edges in ``edge_inputs``, one node shard per task.

    Returns, per node shard r (len == shards), the path of a file holding columns node int64, rep int64
    for every node with rep < node, sorted by node.  ``run_tasks(fn, args_list)`` runs ``fn(*args)`` for
    each tuple (here, in other processes or as Ray tasks) and returns the results in order.  Resumable:
    see the module docstring."""
    if shards < 1 or partitions < 1:
        raise ValueError(f"shards ({shards}) and partitions ({partitions}) must be at least 1")
    if len(edge_inputs) != shards:
        raise ValueError(f"edge_inputs has {len(edge_inputs)} entries for {shards} shards: give one list per shard")
    results = [result_path(folder, r) for r in range(shards)]
    if all(fs.exists(path) for path in results):
        return results
    fs.makedirs(folder)
    last = _converge(folder, edge_inputs, partitions, run_tasks)
    counts = run_tasks(component_result_task, [(_inbox(folder, last, r, shards), results[r]) for r in range(shards)])
    log.info("connected components in %s: %d nodes with a smaller rep, after %d rounds", folder, sum(counts), last)
    return results
