"""Retention: what a job's directory keeps of its intermediate state once its export succeeded."""

from __future__ import annotations

from airflow_provider_dj.core import fs as storage
from airflow_provider_dj.engine.jobdir.layout import CHECKPOINTS_DIR, MEDIA_DIR_PREFIX, STATE_DIR_PREFIXES
from airflow_provider_dj.engine.storage.context import JobContext


def apply_retention(ctx: JobContext, markers: dict[int, dict]) -> dict:
    """Delete intermediate state after a *successful* export, as the recipe asks.

    keep_all keeps everything; keep_failed_only keeps the checkpoints of
    partitions that set samples aside in failed/ (so they can be inspected or
    reprocessed) and removes the rest; cleanup_all removes all op checkpoints,
    dedup keys and masks.  The media files an op wrote (``checkpoints/media_op_*``) go with the
    checkpoints of their partition: the export holds its own copies.  partitioning_info.json, failed/ samples, events and
    the summary are always kept, and preserve_intermediate_data: true keeps
    everything.  A failed or stopped job never reaches this point, so resume
    state is never deleted by a failure (invariant 7).
    """
    st = ctx.recipe.intermediate_storage
    policy = "keep_all" if st.preserve_intermediate_data else st.retention_policy
    if policy == "keep_all":
        return {"policy": policy, "removed": []}
    root = storage.join(ctx.job_dir, CHECKPOINTS_DIR)
    removed = []
    keep_pids = {pid for pid, m in markers.items() if any(a.get("failed") for a in m.get("accounting", []))}
    for d in storage.listdir(root):
        full = storage.join(root, d)
        if not d.startswith(STATE_DIR_PREFIXES):
            continue
        if policy == "cleanup_all" or not keep_pids:
            storage.remove_tree(full)
            removed.append(d)
            continue
        for name in storage.listdir(full):
            try:
                pid = int(name.split("_")[1].split(".")[0])
            except (IndexError, ValueError):
                continue
            if pid not in keep_pids:
                if d.startswith(MEDIA_DIR_PREFIX) and not name.endswith(".json"):  # a partition's files: a folder
                    storage.remove_tree(storage.join(full, name))
                else:
                    storage.remove(storage.join(full, name))
        removed.append(f"{d} (except partitions {sorted(keep_pids)})")
    return {"policy": policy, "removed": removed}
