"""Reuse across jobs: a partition starts from an earlier job's checkpoint of the same rows and op chain.

Opt-in with ``intermediate_storage.reuse_across_jobs: true`` (docs/nightly.md, "Reuse across
nights").  A segment run that finds no checkpoint of its own looks its partition up in the work
dir's index (engine/storage/reuse_index.py), latest checkpoint first, and takes the first that:

1. has the same partition content hash, first row and row count, and the same op-chain
   fingerprint, provider version, op implementation versions and storage format (the index key);
2. comes after no global op whose keep mask differs: for every deduplicator up to that checkpoint,
   this job's mask of the partition (computed over *this* job's whole input) must equal the source
   job's mask bit for bit.  A first occurrence that moved (a new row before an old one, an old row
   now a duplicate of an earlier new one) changes the mask, and the partition is recomputed from
   the mask on; otherwise the rows after the deduplicator are provably the same;
3. set no samples aside in ``failed/`` (those files live in the source job, not in this one);
4. loads and verifies exactly as a resumed checkpoint does (commit marker, content hash,
   fingerprint, size, xxh3 of every file, delta bases).

It is then committed here as a reuse marker (``CheckpointStore.save_reference``: the data is read in
place, never copied) after its source job is pinned, so gc keeps the source.  Anything else — no
entry, a deleted or damaged source, a different mask — means the partition is computed, as without
reuse.  The deduplicators' key phase is reused the same way (its keys are content-addressed too);
their global step always runs again over all partitions, which is what keeps the masks exact.

Entries are published only by a job that exported successfully (``publish_job``), one atomic file
per key (invariant 8).
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import xxhash

from airflow_provider_dj.core import fs as storage
from airflow_provider_dj.engine.execution.segment_context import PartitionState, SegmentContext
from airflow_provider_dj.engine.jobdir.integrity import FAILED_FILE_KEY, MEDIA_MANIFEST_KEY
from airflow_provider_dj.engine.jobdir.layout import CHECKPOINT_STORE
from airflow_provider_dj.engine.observe.lineage_reuse import copy_reused_lineage
from airflow_provider_dj.engine.storage.checkpoints import CheckpointStore, StorageFormat
from airflow_provider_dj.engine.storage.global_op_state import MASK_COLUMN, keys_store, mask_store
from airflow_provider_dj.engine.storage.resume_point import checkpoint_candidates
from airflow_provider_dj.engine.storage.reuse_index import ReuseIndex, chain_fingerprint, entry_key, pin_source
from airflow_provider_dj.ops.columns import REUSED_ROWS_COLUMN

if TYPE_CHECKING:
    from airflow_provider_dj.engine.config.schema import Recipe
    from airflow_provider_dj.engine.jobdir.progress_log import PartitionProgressLog
    from airflow_provider_dj.engine.planning.plan import ExecutionPlan
    from airflow_provider_dj.engine.storage.context import JobContext

log = logging.getLogger("airflow_provider_dj.engine.execution.segment_runner")

REUSED_EVENT = "checkpoint_reused"
PLACEHOLDER_COLUMN = REUSED_ROWS_COLUMN


def reuse_off_reason(recipe: Recipe) -> str | None:
    """Why a recipe that asks for reuse gets none, or None.

    Said out loud (``dj-airflow validate``, the validate task's log, the summary's ``reuse.off``)
    because most of Data-Juicer's shipped recipes set ``open_tracer: true``: adding
    ``reuse_across_jobs`` to one would otherwise reuse nothing, night after night, without a word."""
    if recipe.intermediate_storage.reuse_across_jobs and recipe.tracer.open_tracer:
        return (
            "open_tracer is true, and reuse is off while the tracer is on (a reused partition would have no "
            "trace samples); set open_tracer: false (or --set open_tracer=false) to reuse earlier jobs' checkpoints"
        )
    return None


def reuse_enabled(recipe: Recipe) -> bool:
    """Opted in, and no tracer (its per-partition samples would be missing for a reused partition)."""
    return bool(recipe.intermediate_storage.reuse_across_jobs) and reuse_off_reason(recipe) is None


def _key(plan: ExecutionPlan, part: dict[str, Any], op_index: int, store: CheckpointStore) -> str:
    return entry_key(
        part["content_hash"],
        part["start_row"],
        part["num_rows"],
        op_index,
        chain_fingerprint(plan, op_index, store.fmt, store.prefix),
    )


def reuse_from_earlier_job(sc: SegmentContext, plog: PartitionProgressLog) -> PartitionState | None:
    """The state of the latest reusable checkpoint of an earlier job inside this segment; None if none."""
    if not reuse_enabled(sc.recipe):
        return None
    index = ReuseIndex(storage.dirname(sc.job_dir))
    for k in checkpoint_candidates(sc.plan.checkpoint_points, sc.target, sc.seg.start - 1):
        entry = index.lookup(_key(sc.plan, sc.part, k, sc.store))
        if not entry or entry.get("job_id") == sc.ctx.job_id:
            continue
        state = _reuse_checkpoint(sc, k, entry)
        if state is not None:
            plog.resumed(k, sc.op_name(k), state.table.num_rows)
            log.info(
                "%s: reusing the checkpoint after op %d (%s) of job %s, %d rows",
                sc.label,
                k,
                sc.op_name(k),
                entry["job_id"],
                state.table.num_rows,
            )
            return state
    return None


def partitions_reusable_whole(
    recipe: Recipe, plan: ExecutionPlan, info: dict[str, Any], job_dir: str
) -> frozenset[int]:
    """The partitions whose first segment an earlier job's checkpoint covers to its last op: what the
    planner packs into one group per run (``execution_groups``' ``whole``).

    Index lookups only (one small file each, nothing loaded or verified), so a hint: the partition
    task still verifies the checkpoint and its masks, and computes whatever it cannot reuse."""
    if not reuse_enabled(recipe) or not plan.segments or not info.get("partitions"):
        return frozenset()
    target = plan.segments[0].end - 1
    if target < 0 or target not in set(plan.checkpoint_points):
        return frozenset()
    st = recipe.intermediate_storage
    chain = chain_fingerprint(plan, target, StorageFormat(st.format, st.compression), CHECKPOINT_STORE)
    index, job_id = ReuseIndex(storage.dirname(job_dir)), storage.basename(job_dir)
    found = set()
    for part in info["partitions"]:
        entry = index.lookup(entry_key(part["content_hash"], part["start_row"], part["num_rows"], target, chain))
        if entry and entry.get("job_id") != job_id:
            found.add(int(part["partition_id"]))
    return frozenset(found)


def _same_masks(sc: SegmentContext, source_dir: str, source_pid: int, upto: int) -> bool:
    """Every global op at or before ``upto`` keeps exactly the same rows of this partition in both jobs."""
    for op in sc.plan.ops[: upto + 1]:
        if not op.is_global:
            continue
        new = mask_store(sc.job_dir).load_valid(op.index, op.name, sc.partition_id, sc.phash, op.fingerprint)
        old = mask_store(source_dir).load_valid(op.index, op.name, source_pid, sc.phash, op.fingerprint)
        if new is None or old is None:
            return False
        if not new.table.column(MASK_COLUMN).combine_chunks().equals(old.table.column(MASK_COLUMN).combine_chunks()):
            log.info(
                "%s: not reusing job %s past op %d (%s): its keep mask differs here (a first occurrence moved)",
                sc.label,
                storage.basename(source_dir),
                op.index,
                op.name,
            )
            return False
    return True


def _reuse_checkpoint(sc: SegmentContext, k: int, entry: dict[str, Any]) -> PartitionState | None:
    source_job, source_pid = str(entry["job_id"]), int(entry.get("partition_id", -1))
    source_dir = storage.join(storage.dirname(sc.job_dir), source_job)
    pin_source(sc.job_dir, source_job)  # before anything of the source is read: gc keeps it from now on
    if not _same_masks(sc, source_dir, source_pid, k):
        return None
    source = CheckpointStore(source_dir, sc.store.fmt)
    marker = source.read_marker(k, sc.op_name(k), source_pid)
    # Not reused: a checkpoint with failed/ samples, or naming media files an op wrote (those lie in the
    # source job's directory, where this job's later checkpoints and its export would not find them).
    if not marker or any(
        FAILED_FILE_KEY in (a or {}) or MEDIA_MANIFEST_KEY in (a or {}) for a in marker.get("accounting") or []
    ):
        return None
    whole = k == sc.target
    table = None
    if whole:
        # The segment's whole output: no op runs on it here, so its rows are not needed now. Every
        # integrity check runs (verify_valid); the next segment and the export decode it with load_valid.
        verified = source.verify_valid(k, sc.op_name(k), source_pid, sc.phash, sc.fp(k))
        if verified is None:
            return None
        marker = verified
    else:
        loaded = source.load_valid(k, sc.op_name(k), source_pid, sc.phash, sc.fp(k))
        if loaded is None:  # missing, changed or torn: never trusted (load_valid said why)
            return None
        marker, table = loaded.marker, loaded.table
    keys_reused, key_bytes = False, 0
    if whole and sc.seg.keys_for_global is not None:
        keys_reused, key_bytes = _reuse_keys(sc, sc.seg.keys_for_global, source_dir, source_job, source_pid)
    if table is None and sc.seg.keys_for_global is not None and not keys_reused:
        loaded = source.load_valid(k, sc.op_name(k), source_pid, sc.phash, sc.fp(k))  # rows for the key phase
        if loaded is None:
            return None
        marker, table = loaded.marker, loaded.table
    # Its rows' lineage up to k comes from the source too; written before the marker commits (a crash
    # in between leaves no reused state without it), with this job's duplicate matches.
    copy_reused_lineage(sc, k, source_dir, source_pid)
    sc.store.save_reference(
        op_index=k,
        op_name=sc.op_name(k),
        partition_id=sc.partition_id,
        source_job_id=source_job,
        source_partition_id=source_pid,
        source_marker=marker,
        partition_hash=sc.phash,
        fingerprint=sc.fp(k),
    )
    ref = sc.store.read_marker(k, sc.op_name(k), sc.partition_id) or marker
    sc.checkpoints.loaded(k, ref)
    sc.reused_keys = keys_reused
    sc.result.reused_from_job = source_job
    rows = int(marker.get("num_rows") or 0)
    sc.events.emit(
        REUSED_EVENT,
        partition_id=sc.partition_id,
        segment=sc.segment_index,
        op_index=k,
        op_name=sc.op_name(k),
        output_rows=rows,
        source_job=source_job,
        source_partition_id=source_pid,
        bytes=source.bytes_loaded + key_bytes,
        whole_segment=whole,
        keys_reused=keys_reused,
        status="reused",
    )
    if table is None:
        # Nothing runs after it in this segment: a stand-in of the right row count (a null column has no
        # buffers) carries the count to the segment's report; no reader sees it.
        table = pa.table({PLACEHOLDER_COLUMN: pa.nulls(rows)})
    return PartitionState(table, list(marker.get("accounting", [])), k, k)


def _reuse_keys(sc: SegmentContext, g: int, source_dir: str, source_job: str, source_pid: int) -> tuple[bool, int]:
    """The source's committed dedup keys of this partition, committed here as a reuse marker; (done, bytes)."""
    source = keys_store(source_dir)
    marker = source.verify_valid(g, sc.op_name(g), source_pid, sc.phash, sc.fp(g))  # the global step decodes it
    if marker is None:
        return False, 0
    sc.kstore.save_reference(
        op_index=g,
        op_name=sc.op_name(g),
        partition_id=sc.partition_id,
        source_job_id=source_job,
        source_partition_id=source_pid,
        source_marker=marker,
        partition_hash=sc.phash,
        fingerprint=sc.fp(g),
    )
    return True, source.bytes_loaded


# -- publishing, after a successful export -------------------------------------------------------------
def publish_job(ctx: JobContext) -> int:
    """Index every committed checkpoint and key set of this completed job; returns the entries written.

    A reuse marker is published as its source (the job holding the data), so chains stay one hop.
    Never raises: the index is an optimisation, and the export it follows is already committed."""
    if not reuse_enabled(ctx.recipe):
        return 0
    written = 0
    try:
        index = ReuseIndex(storage.dirname(ctx.job_dir))
        plan, parts = ctx.plan, ctx.partitioning_info["partitions"]
        stores = [(CheckpointStore(ctx.job_dir, ctx.storage_format), list(plan.checkpoint_points))]
        stores.append((keys_store(ctx.job_dir), [op.index for op in plan.ops if op.is_global]))
        for store, points in stores:
            for k in points:
                name = plan.ops[k].name
                for p in parts:
                    pid = p["partition_id"]
                    if not store.is_committed(k, name, pid, p["content_hash"], plan.ops[k].fingerprint):
                        continue
                    marker = store.read_marker(k, name, pid) or {}
                    ref = marker.get("reference") or {}
                    index.publish(
                        _key(plan, p, k, store),
                        {
                            "job_id": ref.get("job_id") or ctx.job_id,
                            "partition_id": int(ref.get("partition_id", pid)),
                            "op_index": k,
                            "op_name": name,
                            "store": store.prefix,
                            "partition_hash": p["content_hash"],
                            "start_row": p["start_row"],
                            "num_rows": p["num_rows"],
                            "published_by": ctx.job_id,
                        },
                    )
                    written += 1
    except Exception as exc:  # noqa: BLE001 - the export is committed; a missing entry only costs recomputation
        log.warning("could not publish this job's checkpoints to the reuse index: %s", exc)
    return written


# -- the summary's reuse section --------------------------------------------------------------------------
def reuse_summary(events: list[dict[str, Any]], plan: ExecutionPlan, num_partitions: int) -> dict[str, Any]:
    """What this job reused and what it computed, from its ``checkpoint_reused`` events."""
    latest: dict[
        tuple[Any, ...], dict[str, Any]
    ] = {}  # one per partition, segment and op: a retried task reports again
    for e in events:
        if e.get("event_type") == REUSED_EVENT:
            latest[(e.get("partition_id"), e.get("segment"), e.get("op_index"))] = e
    reused = list(latest.values())
    whole: dict[int, set[int]] = {}
    for e in reused:
        if e.get("whole_segment"):
            whole.setdefault(int(e["partition_id"]), set()).add(int(e.get("segment", 0)))
    n_segments = len(plan.segments)
    fully = {pid for pid, segs in whole.items() if len(segs) == n_segments}
    return {
        "partitions_reused": len(fully),
        "partitions_partly_reused": len({int(e["partition_id"]) for e in reused} - fully),
        "checkpoints_reused": len(reused) + sum(1 for e in reused if e.get("keys_reused")),
        "bytes_reused": int(sum(int(e.get("bytes") or 0) for e in reused)),
        "source_jobs": sorted({str(e.get("source_job")) for e in reused}),
        "computed_partitions": num_partitions - len(fully),
    }


def reuse_line(reuse: dict[str, Any] | None) -> str | None:
    """The job summary's ``reuse`` section as the one line a person reads after a night: what was reused
    from which job (partitions, checkpoints, export bytes) and what was computed; None without reuse."""
    if not reuse:
        return None
    if reuse.get("off"):
        return f"off: {reuse['off']}"
    total = reuse["partitions_reused"] + reuse["computed_partitions"]
    sources = ", ".join(reuse["source_jobs"]) or "no earlier job"
    line = (
        f"reused from {sources}: {reuse['partitions_reused']} of {total} partitions, "
        f"{reuse['checkpoints_reused']} checkpoints ({_size(reuse['bytes_reused'])})"
    )
    if reuse.get("export_parts_reused") is not None:
        line += f", {reuse['export_parts_reused']} export parts ({_size(reuse.get('export_bytes_reused') or 0)})"
    return line + f"; {reuse['computed_partitions']} computed"


def _size(n: float) -> str:
    """Bytes for a person: B below 1 KiB, else KiB, MiB or GiB with one decimal."""
    if n < 1024:
        return f"{int(n)} B"
    for unit in ("KiB", "MiB", "GiB"):
        n /= 1024
        if n < 1024 or unit == "GiB":
            return f"{n:.1f} {unit}"
    raise AssertionError("unreachable")


# -- export parts: the serialized rows of a reused final checkpoint -------------------------------------
EXPORT_PART_STORE = "export_part_jsonl"


def _export_part_key(ctx: JobContext, source_job: str, source_pid: int) -> str:
    """The JSONL bytes of one final checkpoint (its source job and partition) as this recipe exports them."""
    plan, recipe = ctx.plan, ctx.recipe
    final = plan.final_op_index
    doc = [
        EXPORT_PART_STORE,
        source_job,
        int(source_pid),
        chain_fingerprint(plan, final, ctx.storage_format, CHECKPOINT_STORE),
        bool(recipe.keep_stats_in_res_ds),
        bool(recipe.keep_hashes_in_res_ds),
    ]
    return entry_key("", 0, 0, final, json.dumps(doc))


def checkpoint_source(job_id: str, pid: int, marker: dict[str, Any]) -> tuple[str, int]:
    """The job and partition whose data file a final checkpoint is (itself, or what its reuse marker names)."""
    ref = (marker or {}).get("reference") or {}
    return (str(ref["job_id"]), int(ref.get("partition_id", pid))) if ref.get("job_id") else (job_id, pid)


def reused_export_part(ctx: JobContext, pid: int, marker: dict[str, Any]) -> bytes | memoryview | None:
    """The exported JSONL bytes of partition ``pid`` when an earlier export wrote the same final checkpoint:
    read from that export at the recorded range and trusted only if its length, row count and xxh3 match.

    Only for a reused final checkpoint (a reuse marker): its rows are then exactly the rows the earlier
    job exported, masks included. None means serialize as usual."""
    found = reused_export_file(ctx, pid, marker)
    return None if found is None else found[0]


def reused_export_file(
    ctx: JobContext, pid: int, marker: dict[str, Any]
) -> tuple[bytes | memoryview, str | None, str] | None:
    """``reused_export_part``'s bytes; the local file that holds exactly them when the earlier export
    was one shard per partition (``export_layout: partition_shards``), else None: such a file can be
    linked into the new export instead of written again; and their xxh3-128, as checked."""
    if not (marker or {}).get("reference"):
        return None
    source = checkpoint_source(ctx.job_id, pid, marker)
    entry = ReuseIndex(storage.dirname(ctx.job_dir)).lookup(_export_part_key(ctx, *source))
    if not entry or int(entry.get("rows", -1)) != int(marker.get("num_rows", -2)):
        return None
    try:
        data, to_the_end = _read_part(entry["export_path"], int(entry["offset"]), int(entry["length"]))
        whole = bool(entry.get("whole_file")) and to_the_end
    except (OSError, KeyError, ValueError) as exc:
        log.info("partition %d: the earlier export part is unreadable (%s); serializing", pid, exc)
        return None
    digest = xxhash.xxh3_128_hexdigest(data)
    if len(data) != int(entry["length"]) or digest != entry.get("xxh3"):
        log.info("partition %d: the earlier export changed since (%s); serializing", pid, entry["export_path"])
        return None
    whole = whole and int(entry["offset"]) == 0 and not storage.is_url(entry["export_path"])
    return data, entry["export_path"] if whole else None, digest


def _read_part(path: str, offset: int, length: int) -> tuple[bytes | memoryview, bool]:
    """The bytes at ``[offset, offset + length)`` of ``path`` (fewer where the file is shorter), and
    whether nothing follows them.  A local file's are mapped, not copied: a night's reused parts are
    hundreds of MB that are only hashed and linked (copying them cost a quiet night a third of its time)."""
    if not storage.is_url(path) and length > 0:
        mapped = storage.map_read(path)
        if mapped is not None and offset + length <= len(mapped):
            return memoryview(mapped)[offset : offset + length], offset + length == len(mapped)
    with storage.open_read(path) as fh:
        fh.seek(offset)
        data = fh.read(length)
        return data, not fh.read(1)


def mostly_reused_export(ctx: JobContext) -> bool:
    """Whether most final checkpoints are reuse markers: then the export copies their bytes from the last
    export in this process (``reused_export_part``) instead of serializing every partition in parallel."""
    if not reuse_enabled(ctx.recipe):
        return False
    plan, parts = ctx.plan, ctx.partitioning_info["partitions"]
    store = CheckpointStore(ctx.job_dir, ctx.storage_format)
    final = plan.final_op_index
    refs = sum(
        1 for p in parts if (store.read_marker(final, plan.ops[final].name, p["partition_id"]) or {}).get("reference")
    )
    return refs * 2 > len(parts)


def publish_export_parts(ctx: JobContext, export_path: str, written: list[dict[str, Any]]) -> int:
    """Index where this export holds each partition's JSONL bytes, for the next job that reuses its
    final checkpoint: in ``export_path``, or in the entry's own ``path`` (a shard of its own, then
    ``whole_file``).  Published after the export committed; never raises."""
    if not reuse_enabled(ctx.recipe):
        return 0
    n = 0
    try:
        index = ReuseIndex(storage.dirname(ctx.job_dir))
        for w in written:
            source_job, source_pid = w["source"]
            index.publish(
                _export_part_key(ctx, source_job, source_pid),
                {
                    "job_id": ctx.job_id,
                    "export_path": w.get("path", export_path),
                    **({"whole_file": True} if w.get("whole_file") else {}),
                    "offset": w["offset"],
                    "length": w["length"],
                    "xxh3": w["xxh3"],
                    "rows": w["rows"],
                    "store": EXPORT_PART_STORE,
                    "source_job": source_job,
                    "source_partition_id": source_pid,
                },
            )
            n += 1
    except Exception as exc:  # noqa: BLE001 - the export is committed; a missing entry only costs serializing
        log.warning("could not publish this export's parts to the reuse index: %s", exc)
    return n
