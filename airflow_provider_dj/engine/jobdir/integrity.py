"""Checksums for the job directory's files other than checkpoints, and how they are checked.

Checkpoints carry a commit marker with their size and xxh3 (engine/storage/checkpoints.py).
The other files a later task or reader trusts get the same protection in the
form that suits each, without new files next to them (so listings of
``failed/`` and ``trace/`` stay what users and Data-Juicer expect):

* JSON documents the engine writes and reads back (``partitioning_info.json``,
  trace candidate files) carry ``checksum_xxh3_128``: the xxh3 of the
  document's canonical JSON (sorted keys, compact) without that key.  One
  flipped byte either breaks the JSON or changes a value, and either is
  caught; re-indenting the file is not a change.
* A ``failed/`` sample file is recorded, with its byte size and xxh3, in the
  accounting entry of the op that wrote it; that entry is committed in the
  next checkpoint's marker, so "checkpoint committed" implies "its failed
  samples are exactly these bytes".  Loading the checkpoint re-checks them.
* Merged trace files (``trace/*.jsonl``) are listed with size and xxh3 in
  ``trace/trace_report.json``, written after them.

Everything here only reads and compares; what to do about a mismatch
(recompute, refuse) is the caller's decision.
"""

from __future__ import annotations

import json

import xxhash

from airflow_provider_dj.core import fs as storage

CHECKSUM_KEY = "checksum_xxh3_128"


def file_digest(data: bytes | memoryview) -> str:
    """Checksum of a whole file's bytes (checkpoint, export and job-directory document integrity)."""
    return xxhash.xxh3_128_hexdigest(data)


def canonical_digest(doc: dict, key: str = CHECKSUM_KEY) -> str:
    body = {k: v for k, v in doc.items() if k != key}
    return file_digest(json.dumps(body, sort_keys=True, separators=(",", ":"), default=str).encode())


def seal_json(doc: dict, key: str = CHECKSUM_KEY) -> dict:
    """``doc`` with its checksum added (in place, and returned)."""
    doc[key] = canonical_digest(doc, key)
    return doc


def json_seal_problem(doc: object, key: str = CHECKSUM_KEY) -> str | None:
    """Why a sealed JSON document is not as written (None: it is)."""
    if not isinstance(doc, dict):
        return f"it holds a JSON {type(doc).__name__}, not an object"
    recorded = doc.get(key)
    if not recorded:
        return f"it has no {key} (written by an older version, or the key itself was damaged)"
    got = canonical_digest(doc, key)
    if got != recorded:
        return f"its content hashes to {got} but it recorded {recorded} (changed after it was written)"
    return None


def file_seal(data: bytes) -> dict:
    return {"bytes": len(data), "xxh3_128": file_digest(data)}


def bytes_problem(data: bytes, seal: dict) -> str | None:
    if len(data) != seal.get("bytes"):
        return f"it has {len(data)} bytes, {seal.get('bytes')} were committed (torn or changed)"
    got = file_digest(data)
    if got != seal.get("xxh3_128"):
        return f"its xxh3 is {got}, {seal.get('xxh3_128')} was committed (changed after commit)"
    return None


def file_problem(path: str, seal: dict) -> str | None:
    """Why the file at ``path`` is not the one ``seal`` recorded (None: it is)."""
    try:
        data = storage.read_bytes(path)
    except FileNotFoundError:
        return "it is missing"
    return bytes_problem(data, seal)


# -- media files an op wrote ---------------------------------------------------
#: In an op's accounting entry (``Op.writes_media``): the seal (``path`` relative to the job dir,
#: ``bytes``, ``xxh3_128``) of its media manifest, which lists the files its output rows name, each
#: with its size and xxh3 (``{"dir": <relative folder>, "files": [{"name", "bytes", "xxh3_128"}]}``).
#: Committed with the next checkpoint's marker like the ``failed/`` file, so a checkpoint is trusted
#: only with its manifest and every file it lists intact; the markers stay small however many files.
MEDIA_MANIFEST_KEY = "media_manifest"


def read_media_manifest(job_dir: str, accounting_entry: dict) -> tuple[dict | None, str | None]:
    """(the manifest an op's accounting entry commits, None) or (None, why it is not as committed);
    (None, None) when the entry has none."""
    seal = accounting_entry.get(MEDIA_MANIFEST_KEY)
    if not seal:
        return None, None
    path = storage.join(job_dir, *str(seal["path"]).split("/"))
    try:
        data = storage.read_bytes(path)
    except FileNotFoundError:
        return None, f"the media manifest of op {accounting_entry.get('op_index')} at {path}: it is missing"
    problem = bytes_problem(data, seal)
    if problem is not None:
        return None, f"the media manifest of op {accounting_entry.get('op_index')} at {path}: {problem}"
    return json.loads(data), None


def media_manifest_files(job_dir: str, manifest: dict) -> list[tuple[str, dict]]:
    """(absolute path, seal) of every file a media manifest lists."""
    folder = storage.join(job_dir, *str(manifest["dir"]).split("/"))
    return [(storage.join(folder, f["name"]), f) for f in manifest.get("files") or ()]


def media_files_problem(job_dir: str, accounting_entry: dict) -> str | None:
    """Why the media manifest an op's accounting entry commits, or a file it lists, is not as committed
    (None: all are, or the entry has none)."""
    manifest, problem = read_media_manifest(job_dir, accounting_entry)
    if manifest is None:
        return problem
    for path, seal in media_manifest_files(job_dir, manifest):
        problem = file_problem(path, seal)
        if problem is not None:
            return f"the media file of op {accounting_entry.get('op_index')} at {path}: {problem}"
    return None


# -- failed/ samples ----------------------------------------------------------
FAILED_FILE_KEY = "failed_file"


def failed_file_problem(job_dir: str, accounting_entry: dict) -> str | None:
    """Why the ``failed/`` file an op's accounting entry records is not as committed (None: it is, or none)."""
    seal = accounting_entry.get(FAILED_FILE_KEY)
    if not seal:
        return None
    path = storage.join(job_dir, *str(seal["path"]).split("/"))
    problem = file_problem(path, seal)
    return (
        None if problem is None else f"the failed samples of op {accounting_entry.get('op_index')} at {path}: {problem}"
    )


def failed_file_problems(job_dir: str, per_partition: dict[int, list[dict]]) -> list[str]:
    """Every damaged ``failed/`` file among the partitions' committed accounting."""
    out = []
    for pid in sorted(per_partition):
        for entry in per_partition[pid]:
            problem = failed_file_problem(job_dir, entry)
            if problem:
                out.append(f"partition {pid}: {problem}")
    return out
