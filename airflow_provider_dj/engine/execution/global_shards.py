"""A global op's step in shards: bounded memory per task, committed shard by shard.

The single-process step (``global_ops.py``) holds a key for every row at once.  Here the same decision,
"keep the first occurrence by input row", is made in stages of tasks (``shard_stages.py``), each
task committing its own output in the job directory (``layout.global_shards_dir``):

1. *scatter*, one task per partition: its keys become items, one file batch per key shard;
2. *resolve*, one task per key shard: the items of every partition in that shard, sorted, give the
   duplicate edges (a row and an earlier row it duplicates), written by node shard (a range of
   partitions) of the later row;
3. *components* (MinHash, SimHash): edges found in different shards chain rows into clusters, so the
   clusters' smallest rows come from rounds of Large-Star/Small-Star over the node shards
   (``shard_components.py``); exact keys need none (each key's edges already point at its first row);
4. *partners*, with lineage on and rows removed: the representatives' input rows and MinHash bands,
   each partition's keys read once for the whole step (``shard_partners.py``);
5. *masks*, one task per partition (``shard_masks.py``): its removed rows, committed as its keep mask;
   with ``dedup_history`` or the tracer on the op, a task per partition first looks its kept rows up in
   the pinned history and picks its first duplicate pairs, and this process writes the op's history
   duplicates and trace file from them before any mask commits (``_history_and_trace``).

A stage's task whose output is committed is skipped, so a retried step redoes only what did not
commit, and every task is deterministic, so a redone one writes the same bytes.  The tasks run on Ray
where this process is connected to it (a Ray task retried when its worker dies), else one by one here.
The stage folder is named by a digest of the op, its partitions and the shard counts, so a step
planned differently never reads another's files.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from airflow_provider_dj.core import fs as storage
from airflow_provider_dj.engine.execution import shard_stages
from airflow_provider_dj.engine.execution.shard_components import node_shard, sharded_components
from airflow_provider_dj.engine.execution.shard_masks import commit_partition_mask
from airflow_provider_dj.engine.execution.shard_partners import find_partners
from airflow_provider_dj.engine.history.lookup import (
    checks_history,
    concat_history_duplicates,
    write_history_duplicates,
)
from airflow_provider_dj.engine.history.pin import read_pin
from airflow_provider_dj.engine.input.task_map import RunTasks, default_task_runner
from airflow_provider_dj.engine.jobdir import layout
from airflow_provider_dj.engine.jobdir.events import EventLog
from airflow_provider_dj.engine.observe.lineage import lineage_enabled
from airflow_provider_dj.engine.observe.tracer import (
    duplicate_trace_limit,
    first_pairs_by_representative,
    write_duplicate_pairs,
)
from airflow_provider_dj.engine.planning.global_memory import shard_budget_bytes
from airflow_provider_dj.engine.storage.context import JobContext
from airflow_provider_dj.ops.base import SignatureDeduplicator
from airflow_provider_dj.ops.registry import create_op

if TYPE_CHECKING:
    from airflow_provider_dj.engine.history.lookup import HistoryDuplicates
    from airflow_provider_dj.engine.planning.plan import PlannedOp
    from airflow_provider_dj.ops.base import Op

log = logging.getLogger(__name__)

#: The stage files' format, part of the stage folder's name: a folder of another format is never read.
STAGE_FORMAT = 2


def _stage_folder(
    job_dir: str, op_index: int, op: PlannedOp, parts: list[dict[str, Any]], shards: int, node_shards: int
) -> str:
    ident = json.dumps(
        [STAGE_FORMAT, op.fingerprint, [p["content_hash"] for p in parts], shards, node_shards], separators=(",", ":")
    ).encode()
    digest = hashlib.sha256(ident).hexdigest()[:16]
    return storage.join(job_dir, *layout.global_shards_dir(op_index, digest).split("/"))


def resolve_sharded(
    job_dir: str,
    op_index: int,
    shards: int,
    *,
    events: EventLog,
    run_tasks: RunTasks | None = None,
) -> dict[str, Any]:
    """Run the stages for global op ``op_index`` over ``shards`` key shards and commit every
    partition's keep mask; return the op's counts as the single-process step does."""
    ctx = JobContext(job_dir)
    op = ctx.plan.ops[op_index]
    parts = ctx.partitioning_info["partitions"]
    op_impl = create_op(op.name, op.args, ctx.recipe.text_key)
    run = run_tasks or default_task_runner()
    count, node_shards = len(parts), max(1, min(shards, len(parts)))
    folder = _stage_folder(job_dir, op_index, op, parts, shards, node_shards)
    storage.makedirs(folder)
    t0 = time.perf_counter()
    scattered = run(shard_stages.scatter_partition, [(job_dir, op_index, folder, p, shards) for p in range(count)])
    rows = [d["rows"] for d in scattered]
    t1 = time.perf_counter()
    budget = shard_budget_bytes()
    found = run(
        shard_stages.resolve_key_shard,
        [(job_dir, op_index, folder, s, count, node_shards, budget) for s in range(shards)],
    )
    edges = int(sum(f["edges"] for f in found)) + int(sum(d["local_edges"] for d in scattered))
    t2 = time.perf_counter()
    node_of = node_shard(np.arange(count, dtype=np.int64) << np.int64(32), count, node_shards)
    local_files = [storage.join(folder, layout.shard_local_edges_file(p)) for p in range(count)]
    edge_files = [
        [storage.join(folder, layout.shard_edges_file(s, r)) for s in range(shards)] for r in range(node_shards)
    ]
    if edges and isinstance(op_impl, SignatureDeduplicator):
        inputs = [
            files + [local_files[p] for p in range(count) if node_of[p] == r] for r, files in enumerate(edge_files)
        ]
        results = sharded_components(
            storage.join(folder, layout.SHARD_COMPONENTS_DIR),
            inputs,
            partitions=count,
            shards=node_shards,
            run_tasks=run,
        )
        files_of = [[results[int(node_of[p])]] for p in range(count)]
    else:  # exact keys: a row's local edge, then its first row's key-shard edge (shard_stages.removed_rows)
        files_of = [edge_files[int(node_of[p])] + [local_files[p]] for p in range(count)]
    t3 = time.perf_counter()
    lineage = lineage_enabled()
    history, part_history = _history_and_trace(ctx, op_index, op_impl, files_of, rows, run)
    history_band = history is not None and bool(np.any(history.bands >= 0))
    t4 = time.perf_counter()
    partners = lineage and edges > 0
    if partners:
        find_partners(job_dir, op_index, folder, files_of, node_shards, run)
    t5 = time.perf_counter()
    counts = run(
        commit_partition_mask,
        [
            (job_dir, op_index, p, files_of[p], edges > 0, lineage, part_history[p], history_band)
            + ((folder, node_shards) if partners else ())
            for p in range(count)
        ],
    )
    total, kept = int(sum(rows)), int(sum(c["kept"] for c in counts))
    log.info(
        "global op %d (%s) in %d key shards, %d node shards: %d rows, %d edges, %d kept; scatter %.2fs, "
        "resolve %.2fs, components %.2fs, history and trace %.2fs, partners %.2fs, masks %.2fs",
        op_index, op.name, shards, node_shards, total, edges, kept,
        t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4, time.perf_counter() - t5,
    )  # fmt: skip
    events.emit(
        "global_op_shards",
        op_index=op_index,
        op_name=op.name,
        key_shards=shards,
        node_shards=node_shards,
        edges=edges,
        durations={
            "scatter": round(t1 - t0, 6),
            "resolve": round(t2 - t1, 6),
            "components": round(t3 - t2, 6),
            "history_and_trace": round(t4 - t3, 6),
            "partners": round(t5 - t4, 6),
            "masks": round(time.perf_counter() - t5, 6),
        },
    )
    return {"rows": total, "kept": kept, "history": history}


def _history_and_trace(
    ctx: JobContext, op_index: int, op_impl: Op, files_of: list[list[str]], rows: list[int], run: RunTasks
) -> tuple[HistoryDuplicates | None, list[Any]]:
    """With ``dedup_history`` or the tracer on the op: each partition's history duplicates and first
    duplicate pairs (``shard_stages.decide_partition``), then, before any keep mask commits (as the
    single-process step orders them, so a crash in between re-runs the step), the op's
    ``dedup_history/op_<i>_<op>.parquet`` and ``trace/duplicate-<op>.jsonl``, the same bytes as that
    step's.  Returns the op's history duplicates (None: it checks no history) and each partition's.

    This process holds the history duplicates (as the single-process step does) and at most
    ``trace_num`` pairs per partition, never a value per row."""
    job_dir, count = ctx.job_dir, len(rows)
    checks = checks_history(ctx.recipe, op_impl.name)
    trace_num = duplicate_trace_limit(ctx.recipe, op_impl.name)
    if not checks and trace_num is None:
        return None, [None] * count
    # A task's lookup: the recipe's budget for history entries, within half of what one task of the step
    # may use, and the query keys in batches within the other half.
    half = shard_budget_bytes() // 2
    memory = min(ctx.recipe.dedup_history.memory_mb << 20, half) if checks else 0
    decided = run(
        shard_stages.decide_partition,
        [(job_dir, op_index, p, files_of[p], memory, trace_num or 0, half) for p in range(count)],
    )
    offsets = np.concatenate([[0], np.cumsum(rows, dtype=np.int64)])[:-1].tolist()
    history = None
    if checks:
        parts = [d["history"] for d in decided]
        history = concat_history_duplicates(parts, offsets, int(read_pin(job_dir)["version"]))
        candidates = int(sum(d["candidates"] for d in decided))
        if candidates:  # as the single-process step: no file when no row was looked up
            write_history_duplicates(job_dir, op_index, op_impl.name, history, candidates=candidates)
    if trace_num is not None:
        seen: set[int] = set()
        pairs: list[tuple[int, int]] = []
        for d in decided:  # partition order is input order
            if len(pairs) >= trace_num:
                break
            pairs += first_pairs_by_representative(
                [r for r, _ in d["pairs"]], [rep for _, rep in d["pairs"]], trace_num - len(pairs), seen
            )
        flat = [(_flat(rep, offsets), _flat(r, offsets)) for rep, r in pairs]
        write_duplicate_pairs(ctx, op_index, flat, rows, history=history)
    return history, [d.get("history") for d in decided]


def _flat(position: int, offsets: list[int]) -> int:
    """A ``(partition << 32) | row`` position as a row among all partitions' rows of the op, in order."""
    return int(offsets[position >> 32]) + (position & 0xFFFFFFFF)
