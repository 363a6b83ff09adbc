"""JSONL export in parallel: each partition serialized by a Ray worker, concatenated in order.

Turning Arrow rows into JSON lines is Python work (``to_pylist`` plus orjson),
the largest single step of a big run, on one core while the others idle
(docs/benchmarks.md has the figures).  The serialization of one partition
depends on nothing else (``write_jsonl`` keeps no state between tables), so
each partition's final checkpoint is turned into a JSONL *part file* by a Ray
task, and the export task only copies the parts, in partition order, into
the atomic export file while hashing it.  The bytes are exactly those of a
sequential export.

With ``export_layout: partition_shards`` a part is exactly one shard, so it is
not copied at all: the export task hard-links each part file into the shard set
(engine/job/export_shards.py) and only reads it once for the set's checksum.
The worker records each part's size and xxh3-128, hashed as it writes, because
the shard's manifest entry needs them and reading the part again for them is
the work the link saves.

Part files live in ``{job}/export_parts/`` and are written atomically.  They
are never reused: a crash leaves some behind, and the next export rewrites
them (a new file under the same name: a shard linked from the old one keeps
its bytes), then removes them all once the export is committed.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

from airflow_provider_dj import settings
from airflow_provider_dj.core import fs as storage
from airflow_provider_dj.engine.jobdir.layout import EXPORT_PARTS_DIR
from airflow_provider_dj.engine.output.hashing import HashingWriter

PARTS_DIR = EXPORT_PARTS_DIR
# Below this many rows the parts cost more (Ray round trips, a second write) than they save.
DEFAULT_MIN_ROWS = 200_000


def parallel_export_min_rows() -> int:
    raw = settings.raw("parallel_export_min_rows") or str(DEFAULT_MIN_ROWS)
    try:
        return int(raw)
    except ValueError:
        raise ValueError(
            f"DJ_PARALLEL_EXPORT_MIN_ROWS={raw!r} is not a whole number of rows; set it to e.g. "
            f"{DEFAULT_MIN_ROWS} (0: always serialize in parallel) or unset it"
        ) from None


def part_path(job_dir: str, partition_id: int) -> str:
    return storage.join(job_dir, PARTS_DIR, f"part_{partition_id:05d}.jsonl")


def write_part(job_dir: str, partition_id: int) -> dict:
    """Serialize one partition's final checkpoint to its part file (runs in a Ray worker); return its
    ``partition_id``, ``path``, ``rows``, ``bytes`` and ``xxh3_128`` (hex, of the bytes as written)."""
    from airflow_provider_dj.engine.output.errors import MissingFinalCheckpointError
    from airflow_provider_dj.engine.output.fields import clean_for_export
    from airflow_provider_dj.engine.output.media import media_mapping, rewrite_media_paths
    from airflow_provider_dj.engine.storage.checkpoints import CheckpointStore
    from airflow_provider_dj.engine.storage.context import JobContext
    from airflow_provider_dj.engine.storage.jsonl_writer import write_jsonl

    ctx = JobContext(job_dir)
    plan = ctx.plan
    final = plan.final_op_index
    part = ctx.partition(partition_id)
    cp = CheckpointStore(job_dir, ctx.storage_format).load_valid(
        final, plan.ops[final].name, partition_id, part["content_hash"], plan.ops[final].fingerprint
    )
    if cp is None:
        raise MissingFinalCheckpointError(f"partition {partition_id}: final checkpoint is torn; clear its task")
    table = clean_for_export(cp.table, ctx.recipe.keep_stats_in_res_ds, ctx.recipe.keep_hashes_in_res_ds)
    # The export's copies of the media files the rows name (placed by the export step before it commits).
    table = rewrite_media_paths(table, media_mapping(job_dir, {partition_id: cp.marker}, ctx.recipe.export_path))
    path = part_path(job_dir, partition_id)
    with storage.AtomicFileWriter(path, tmp_tag=f"p{partition_id}") as fh:
        out = HashingWriter(fh)
        write_jsonl(table, out)
    return {
        "partition_id": partition_id,
        "path": path,
        "rows": table.num_rows,
        "bytes": out.n,
        "xxh3_128": out.h.hexdigest(),
    }


def parts_on_ray(
    ray: Any, job_dir: str, partition_ids: list[int], *, max_in_flight: int
) -> Callable[[], Iterator[dict]]:
    """A part source for ``export_job``: yields each partition's part, in order, as Ray finishes them.

    At most ``max_in_flight`` partitions are serialized at once (memory: one
    table per worker); the first part is copied while the others are still
    being written.
    """
    remote = ray.remote(num_cpus=1, max_retries=1)(write_part)

    def source() -> Iterator[dict]:
        pending = list(partition_ids)
        refs: dict[int, Any] = {}
        for pid in partition_ids:
            while pending and len(refs) < max(1, max_in_flight):
                nxt = pending.pop(0)
                refs[nxt] = remote.remote(job_dir, nxt)
            ref = refs.pop(pid)
            yield ray.get(ref)

    return source


def remove_parts(job_dir: str) -> None:
    storage.remove_tree(storage.join(job_dir, PARTS_DIR))
