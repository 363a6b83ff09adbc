"""Media files in the export: the files ops wrote (``Op.writes_media``) copied beside the export.

The rows of a final checkpoint name media files in the job directory
(``checkpoints/media_op_<i>_<op>/partition_<p>/<file>``); a job directory is work state that
retention removes, so the export must not point into it.  Before the export is written, every media
file the final checkpoints commit (the media manifests their accounting seals) is hard-linked, or copied
when the two lie on different file systems, into ``<export stem>_media/`` beside the export (each
file to a temporary name, then renamed: a reader never sees half a file), and the export's rows
name those copies (:func:`rewrite_media_paths`: every exact match, in every string or list-of-string
column).  Files are named by their content digest, so exporting again writes the same names; once
the export is committed, files of the folder that it does not name (an earlier export's) go.

The export writes a record of the copies it placed (``layout.EXPORT_MEDIA_RECORD``: each copy's path,
size and xxh3, and the job-directory file it came from) and seals it in the summary, so a re-run of
the completed job checks the copies as it checks the export file (:func:`media_copy_problems`,
``job/completed_export.py``): a copy deleted or changed since is refused by name, nothing rewritten.
"""

from __future__ import annotations

import json
import logging
import os
import uuid

import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_dj.core import fs as storage
from airflow_provider_dj.engine.jobdir.integrity import (
    bytes_problem,
    file_problem,
    file_seal,
    media_manifest_files,
    read_media_manifest,
)
from airflow_provider_dj.engine.jobdir.layout import EXPORT_MEDIA_RECORD
from airflow_provider_dj.engine.output.errors import MissingFinalCheckpointError

log = logging.getLogger(__name__)

MEDIA_SUFFIX = "_media"


class MediaManifestError(MissingFinalCheckpointError):
    """A final checkpoint's media manifest is missing or changed: the partition must be recomputed."""


_DATA_EXTENSIONS = (".jsonl", ".json", ".parquet")


def export_media_dir(export_path: str) -> str:
    """``<folder>/<stem>_media`` for an export at ``<folder>/<stem>.jsonl`` (``.json``, ``.parquet``,
    and a compression suffix after them, are dropped from the stem)."""
    folder, name = storage.dirname(export_path), storage.basename(export_path)
    stem, ext = os.path.splitext(name)
    if ext.lower() not in _DATA_EXTENSIONS:
        inner, ext2 = os.path.splitext(stem)
        if ext2.lower() in _DATA_EXTENSIONS:
            stem = inner
    return storage.join(folder, f"{stem}{MEDIA_SUFFIX}")


def marker_job_dir(job_dir: str, marker: dict) -> str:
    """The job directory a marker's relative paths are under: a reuse marker's source job, else this one."""
    ref = marker.get("reference")
    if ref and ref.get("job_id"):
        return storage.join(storage.dirname(job_dir), ref["job_id"])
    return job_dir


def media_seals(job_dir: str, markers: dict[int, dict]) -> dict[str, dict]:
    """Every media file the final markers commit (through their media manifests): absolute path -> its
    seal.  ``MediaManifestError`` when a manifest is not as committed (the checkpoint that commits it
    is then rejected when loaded, and recomputed)."""
    out: dict[str, dict] = {}
    for pid in sorted(markers):
        base = marker_job_dir(job_dir, markers[pid])
        for entry in markers[pid].get("accounting") or ():
            manifest, problem = read_media_manifest(base, entry)
            if problem is not None:
                raise MediaManifestError(f"partition {pid}: {problem}; clear its task to recompute it")
            if manifest is not None:
                out.update(media_manifest_files(base, manifest))
    return out


def media_mapping(job_dir: str, markers: dict[int, dict], export_path: str) -> dict[str, str]:
    """Each committed media file's path in the job directory -> its path in the export's media folder."""
    return exported_media(job_dir, markers, export_path)[0]


def exported_media(job_dir: str, markers: dict[int, dict], export_path: str) -> tuple[dict[str, str], dict[str, dict]]:
    """``media_mapping`` and the seal of each of its job-directory files (``media_seals``)."""
    target = export_media_dir(export_path)
    seals = media_seals(job_dir, markers)
    return {src: storage.join(target, storage.basename(src)) for src in seals}, seals


def _placed(mapping: dict[str, str]) -> dict[str, str]:
    """Each copy beside the export -> the one job-directory file placed there (several partitions' files
    of one name hold the same bytes: the name is their digest)."""
    return {dst: src for src, dst in sorted(mapping.items(), reverse=True)}


def write_media_record(job_dir: str, mapping: dict[str, str], seals: dict[str, dict]) -> dict:
    """Write the record of the export's media copies into the job directory (``EXPORT_MEDIA_RECORD``) and
    return its seal, for the summary's ``export.media.record``."""
    files = [
        {"path": dst, "bytes": seals[src]["bytes"], "xxh3_128": seals[src]["xxh3_128"], "source": src}
        for dst, src in sorted(_placed(mapping).items())
    ]
    data = json.dumps({"files": files}, indent=1, sort_keys=True).encode()
    storage.atomic_write_bytes(
        storage.join(job_dir, EXPORT_MEDIA_RECORD), data, what="the record of the export's media files"
    )
    return {"path": EXPORT_MEDIA_RECORD, **file_seal(data)}


def media_copy_problems(job_dir: str, media: dict) -> list[str] | None:
    """Why the export's media copies are not those its export placed, one line per copy (the record's own
    damage first, alone); [] when all are; None for a summary written before the record existed, whose
    copies cannot be checked.  ``media``: the summary's ``export.media``."""
    seal = media.get("record")
    if not seal:
        return None
    path = storage.join(job_dir, *str(seal["path"]).split("/"))
    try:
        data = storage.read_bytes(path)
    except FileNotFoundError:
        return [f"{path} (the record of the export's media files): it is missing"]
    problem = bytes_problem(data, seal)
    if problem is not None:
        return [f"{path} (the record of the export's media files): {problem}"]
    out = []
    for f in json.loads(data)["files"]:
        problem = file_problem(f["path"], f)
        if problem is None:
            continue
        restore = (
            f" (the job directory's copy {f['source']} is intact: copy it back)"
            if file_problem(f["source"], f) is None
            else ""
        )
        out.append(f"{f['path']}: {problem}{restore}")
    return out


def _place(src: str, dst: str) -> str:
    """``src`` at ``dst``, by a hard link when both are local on one file system, else by a copy;
    through a temporary name either way.  Returns how (``link`` or ``copy``)."""
    if not storage.is_url(src) and not storage.is_url(dst):
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        tmp = os.path.join(os.path.dirname(dst), f".{os.path.basename(dst)}.tmp-{uuid.uuid4().hex[:12]}")
        try:
            os.link(src, tmp)
            os.replace(tmp, dst)
            return "link"
        except OSError:
            try:
                os.remove(tmp)
            except FileNotFoundError:
                pass
    storage.atomic_write_bytes(dst, storage.read_bytes(src), what="a media file of the export")
    return "copy"


def export_media(mapping: dict[str, str]) -> dict:
    """Place every file of ``mapping`` in the export's media folder (before the export commits)."""
    how = {"link": 0, "copy": 0}
    # Two partitions (or ops) that blurred the same image hold one file each under one name (the
    # name is its content's digest): the export needs it once.
    by_target = _placed(mapping)
    for dst, src in sorted(by_target.items()):
        how[_place(src, dst)] += 1
    return {"files": len(by_target), "linked": how["link"], "copied": how["copy"]}


def remove_unnamed(export_path: str, mapping: dict[str, str]) -> list[str]:
    """After the export is committed: remove the files of its media folder it does not name."""
    folder = export_media_dir(export_path)
    keep = {storage.basename(d) for d in mapping.values()}
    removed = [n for n in storage.listdir(folder) if n not in keep]
    for name in removed:
        storage.remove(storage.join(folder, name))
    if removed:
        log.info("removed %d media file(s) an earlier export left in %s", len(removed), folder)
    return removed


def _rewrite_strings(values: pa.Array, keys: pa.Array, targets: pa.Array) -> pa.Array:
    idx = pc.index_in(values, value_set=keys)
    if idx.null_count == len(idx):
        return values
    return pc.if_else(pc.is_null(idx), values, targets.take(pc.fill_null(idx, 0)))


def rewrite_media_paths(table: pa.Table, mapping: dict[str, str]) -> pa.Table:
    """``table`` with every string equal to a key of ``mapping`` (in a string or list-of-string
    column) replaced by its value."""
    if not mapping or table.num_rows == 0:
        return table
    keys = pa.array(list(mapping), pa.string())
    targets = pa.array(list(mapping.values()), pa.string())
    for i, fld in enumerate(table.schema):
        t = fld.type
        if pa.types.is_string(t):
            col = table.column(i).combine_chunks()
            new = _rewrite_strings(col, keys, targets)
        elif pa.types.is_list(t) and pa.types.is_string(t.value_type):
            col = table.column(i).combine_chunks()
            values = _rewrite_strings(col.values, keys, targets)
            if values is col.values:
                continue
            new = pa.ListArray.from_arrays(col.offsets, values, mask=col.is_null())
        else:
            continue
        table = table.set_column(i, fld, new)
    return table
