"""The media files an op writes (``Op.writes_media``), committed with the checkpoint that names them.

The op writes each file (atomically, named by its content digest) into the folder the engine gives
it, ``layout.media_dir(op, partition)``, beside the op's checkpoints.  Once the op's output is
computed and before any checkpoint after it commits, :func:`commit_media` writes the manifest of the
files the output rows name (``layout.media_manifest``: each file's size and xxh3) and returns the
manifest's seal for the op's accounting entry (which every later checkpoint's marker carries, so
loading one re-checks the manifest and the files: ``integrity.media_files_problem``), and removes
every other file of the folder: those of an earlier try that crashed before its commit, of rows that
failed, and torn temporary files.  So after a commit the folder holds exactly the files committed
checkpoints name; a crash before it leaves only files the retry writes again (same names, same
bytes: the op is deterministic) or removes.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from airflow_provider_dj.core import fs as storage
from airflow_provider_dj.engine.jobdir.integrity import file_seal
from airflow_provider_dj.engine.jobdir.layout import media_dir, media_manifest

if TYPE_CHECKING:
    from airflow_provider_dj.ops.base import Op

log = logging.getLogger(__name__)


def media_folder(job_dir: str, op_index: int, op_name: str, partition_id: int) -> str:
    """The absolute folder of op ``op_index``'s media files of one partition."""
    return storage.join(job_dir, *media_dir(op_index, op_name, partition_id).split("/"))


def commit_media(job_dir: str, op: Op, op_index: int, partition_id: int, out: pa.Table) -> dict[str, Any]:
    """The seal of the manifest of the files op ``op_index``'s output ``out`` names (for its accounting
    entry), written now; every other file of its folder removed."""
    rel = media_dir(op_index, op.name, partition_id)
    folder = storage.join(job_dir, *rel.split("/"))
    named = op.media_named(out)
    removed = [name for name in storage.listdir(folder) if name not in named]
    for name in removed:
        storage.remove(storage.join(folder, name))
    if removed:
        log.info(
            "op %d (%s) partition %d: removed %d uncommitted media file(s) from %s",
            op_index,
            op.name,
            partition_id,
            len(removed),
            folder,
        )
    manifest = {
        "op_index": op_index,
        "op_name": op.name,
        "partition_id": partition_id,
        "dir": rel,
        "files": [{"name": name, **named[name]} for name in sorted(named)],
    }
    data = json.dumps(manifest, indent=1, sort_keys=True).encode()
    manifest_rel = media_manifest(op_index, op.name, partition_id)
    storage.atomic_write_bytes(
        storage.join(job_dir, *manifest_rel.split("/")),
        data,
        what=f"the media manifest of op {op_index} ({op.name}) partition {partition_id}",
    )
    return {"path": manifest_rel, **file_seal(data)}
