"""Each media file's digest, per partition, in a file of its own beside partitioning_info.json.

Why apart: every task of a job reads partitioning_info.json, and a corpus of millions of images would
make a list of every file's digest in it gigabytes.  The partition's record there keeps what the job's
identity needs (the digest of all its media, their count and bytes: engine/input/media.py's
``PartitionMedia``); the digest of each file, which only a resume's explanation of a mismatch and the
job view's thumbnail check read, is in ``checkpoints/media_digests/partition_<p>.json`` (sealed).
Job directories planned before keep the digests inside the record, and are read from there.
"""

from __future__ import annotations

from airflow_provider_dj.core import fs as storage
from airflow_provider_dj.engine.jobdir.integrity import json_seal_problem, seal_json
from airflow_provider_dj.engine.jobdir.layout import loads_json, media_digests_file, write_json

#: The key of the per-file digests in a partition's media record (and in its digests file).
FILE_DIGESTS = "file_digests"


def split_file_digests(info: dict) -> dict[int, dict[str, str]]:
    """Take every partition's per-file digests out of a planned ``info`` (resealing it when any were
    there); returns them by partition id, for :func:`write_file_digests`."""
    found: dict[int, dict[str, str]] = {}
    for p in info.get("partitions", []):
        record = p.get("media")
        if isinstance(record, dict) and FILE_DIGESTS in record:
            found[p["partition_id"]] = record.pop(FILE_DIGESTS)
    if found:
        seal_json(info)
    return found


def write_file_digests(job_dir: str, digests: dict[int, dict[str, str]]) -> None:
    """One sealed file per partition (before partitioning_info.json, whose presence marks a planned job)."""
    for pid, files in digests.items():
        path = storage.join(job_dir, *media_digests_file(pid).split("/"))
        storage.makedirs(storage.dirname(path))
        write_json(path, seal_json({"partition_id": pid, FILE_DIGESTS: files}))


def read_file_digests(job_dir: str, partition: dict) -> dict[str, str] | None:
    """The per-file digests planning recorded for ``partition`` (its record in partitioning_info): from
    its digests file, or from the record itself in a job directory planned before the split; None when
    the partition names no media, or its file is missing or damaged."""
    record = partition.get("media")
    if not isinstance(record, dict):
        return None
    if FILE_DIGESTS in record:
        return dict(record[FILE_DIGESTS])
    path = storage.join(job_dir, *media_digests_file(partition["partition_id"]).split("/"))
    try:
        doc = loads_json(storage.read_bytes(path))
    except (OSError, ValueError):
        return None
    if json_seal_problem(doc) or doc.get("partition_id") != partition["partition_id"]:
        return None
    return dict(doc[FILE_DIGESTS])
