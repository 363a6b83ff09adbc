"""After a successful export: this job's exported rows become the next version of the history index.

Called by the export once the export file is committed and before the job summary says ``completed``
(and before retention removes the dedup keys it reads).  A crash after CURRENT moved and before the
summary is written re-runs the export task, whose commit then finds the job in the index's job table
and adds nothing: a retried export never adds its rows twice.

Which rows: exactly those in the export, each keyed by the history op's key of that row (the keys its
global step committed, matched by input row) and named by its position in the export file.  A row an
op after the deduplicator removed was never exported, so it is not history.
"""

from __future__ import annotations

import logging

import numpy as np

from airflow_provider_dj.core.errors import DJError
from airflow_provider_dj.engine.history.index import HistoryIndex, OpAdditions
from airflow_provider_dj.engine.history.keys import key_args, row_keys
from airflow_provider_dj.engine.history.pin import read_pin
from airflow_provider_dj.engine.storage.global_op_state import keys_store
from airflow_provider_dj.ops.columns import INPUT_ROW_COLUMN
from airflow_provider_dj.ops.registry import create_op

log = logging.getLogger(__name__)


class HistoryCommitError(DJError, RuntimeError):
    """This job's export cannot be added to the history index; the index is left as it was."""


def commit_history(ctx, exported_input_rows: dict[int, np.ndarray], *, before_current_moves=None) -> dict | None:
    """Commit the exported rows' keys; ``exported_input_rows``: per partition id, the input row of each
    exported row, in export order.  Returns the commit record for the summary (None without history)."""
    recipe, plan = ctx.recipe, ctx.plan
    cfg = recipe.dedup_history
    if cfg is None:
        return None
    pin = read_pin(ctx.job_dir)
    index = HistoryIndex(pin["path"])
    done = index.committed_by(ctx.job_id)
    if done is not None:
        log.info("dedup_history: job %s was already committed as version %d; nothing added", ctx.job_id, done)
        return {"status": "already_committed", "version": done, "pinned_version": pin["version"]}
    parts = ctx.partitioning_info["partitions"]
    ks = keys_store(ctx.job_dir)
    additions: dict[str, OpAdditions] = {}
    for op in plan.ops:
        if not op.is_global or op.name not in cfg.ops:
            continue
        op_impl = create_op(op.name, op.args, recipe.text_key)
        k0s, k1s, rows = [], [], []
        offset = 0
        for p in parts:
            pid = p["partition_id"]
            exported = np.asarray(exported_input_rows.get(pid, np.zeros(0, np.int64)), dtype=np.int64)
            cp = ks.load_valid(op.index, op.name, pid, p["content_hash"], op.fingerprint)
            if cp is None:
                raise HistoryCommitError(
                    f"dedup_history: the keys of op {op.index} ({op.name}) partition {pid} are missing, so this "
                    f"job's export cannot be added to the history index at {pin['path']}; clear that partition's "
                    f"segment task (with downstream) to recompute them"
                )
            key_rows = cp.table.column(INPUT_ROW_COLUMN).to_numpy()
            at = np.searchsorted(key_rows, exported)  # both in input order
            if len(exported) and (at.max() >= len(key_rows) or not np.array_equal(key_rows[at], exported)):
                raise HistoryCommitError(
                    f"dedup_history: exported rows of partition {pid} are not among the rows op {op.index} "
                    f"({op.name}) saw; the job directory is inconsistent"
                )
            k0, k1, which = row_keys(op_impl, cp.table, at)
            k0s.append(k0)
            k1s.append(k1)
            rows.append(offset + which)
            offset += len(exported)
        additions[op.name] = OpAdditions(
            key_args=key_args(op_impl),
            k0=np.concatenate(k0s) if k0s else np.zeros(0, np.uint64),
            k1=np.concatenate(k1s) if k1s else np.zeros(0, np.uint64),
            rows=np.concatenate(rows) if rows else np.zeros(0, np.int64),
        )
    result = index.commit(
        job_id=ctx.job_id,
        pinned=int(pin["version"]),
        export_path=recipe.export_path,
        additions=additions,
        before_current_moves=before_current_moves,
    )
    if result.note:
        log.warning("dedup_history: %s", result.note)
    log.info(
        "dedup_history: committed version %d of %s (%s)",
        result.version,
        pin["path"],
        ", ".join(f"{k}: {v} entries" for k, v in result.added.items()),
    )
    return result.to_dict()
