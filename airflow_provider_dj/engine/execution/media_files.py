"""The media files an op writes (``Op.writes_media``), committed with the checkpoint that names them.

The op writes each file (atomically, named by its content digest) into the folder the engine gives
it, ``layout.media_dir(op, partition)``, beside the op's checkpoints.  Once the op's output is
computed and before any checkpoint after it commits, :func:`commit_media` lists the files the output
rows name, with their size and xxh3, for the op's accounting entry (which every later checkpoint's
marker carries, so loading one re-checks the files: ``integrity.media_files_problem``), and removes
every other file of the folder: those of an earlier try that crashed before its commit, of rows that
failed, and torn temporary files.  So after a commit the folder holds exactly the files committed
checkpoints name; a crash before it leaves only files the retry writes again (same names, same
bytes: the op is deterministic) or removes.
"""

from __future__ import annotations

import logging

import pyarrow as pa

from airflow_provider_dj.core import fs as storage
from airflow_provider_dj.engine.jobdir.layout import media_dir

log = logging.getLogger(__name__)


def media_folder(job_dir: str, op_index: int, op_name: str, partition_id: int) -> str:
    """The absolute folder of op ``op_index``'s media files of one partition."""
    return storage.join(job_dir, *media_dir(op_index, op_name, partition_id).split("/"))


def commit_media(job_dir: str, op, op_index: int, partition_id: int, out: pa.Table) -> list[dict]:
    """The seals of the files op ``op_index``'s output ``out`` names (for its accounting entry); every
    other file of its folder removed."""
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
    return [{"path": f"{rel}/{name}", **named[name]} for name in sorted(named)]
