"""Data-Juicer's sharded export (``export_shard_size`` > 0), committed as a set with a manifest.

What Data-Juicer 1.6.1's exporter does, and this module does the same:

* **Shard count**: ``int(dataset_nbytes / export_shard_size) + 1``, at most the number of rows (an
  empty export has no shards).  ``dataset_nbytes`` is the Arrow size of the exported rows after the
  fields that are not exported are dropped; here ``engine/output/arrow_size.py`` computes it over
  the rows we export, equal to pyarrow's ``nbytes`` of them as one table, which is what Data-Juicer
  reads when its dataset has no indices mapping (its last op a mapper).  After a trailing filter
  or deduplicator Data-Juicer scales the size of the table before that op by the fraction of rows
  kept, an estimate of the same quantity: the counts then differ only where the estimate and the
  exact size fall on two sides of a multiple of ``export_shard_size``.
* **Split points**: contiguous row ranges in export order, as ``datasets.Dataset.shard(n, i,
  contiguous=True)``: ``rows // n`` each, the first ``rows % n`` shards one row more.
* **File names**: ``<stem>-<i>-of-<n>.<suffix>`` beside ``export_path``, both numbers zero-padded to
  ``len(str(n)) + 1`` digits.  ``stem`` is the file name up to its first dot on a local path; on an
  ``s3://`` or ``hdfs://`` URL Data-Juicer removes only the last extension, and so does this module.

What this module adds, so a reader never sees half a night: every shard is written to a staged
name first (a disk-full error there leaves the previous set untouched, and the staged files are
removed); only then is the previous manifest retired, the shards renamed into place and the new
manifest (``<stem>.manifest.json``: each shard's file, rows, bytes and xxh3-128; the totals; the job
id) written last, atomically.  A reader that trusts the manifest sees the previous complete set or,
in the moment between, no manifest at all; never a manifest naming shards of another night.  The
previous set's shards that the new one does not overwrite are removed after the commit; the list
of them is kept in a retiring record (``.<stem>.manifest.json.retiring``) until then, so a crash in
between leaves them known to be ours.  A file the previous manifest does not name is never touched.
A single-file export of the same ``export_path`` takes down the set (``retire_shard_set``) once it
is committed, for the same reason.

``export_layout: partition_shards`` uses the same writer and the same commit with other split points:
one shard per non-empty partition (each shard's ``partition_id`` is in the manifest, whose ``layout``
says so).  Those shards are made read-only, and a shard whose bytes an earlier export already holds
in a file of its own is hard-linked from it (``link_next``; copied in the kernel where a link cannot
be made), so a nightly job writes only its new partitions.  Read-only matters because a link is the
same file under two names: an edit through either would change both nights' exports.
"""

from __future__ import annotations

import errno
import json
import os
import posixpath
import shutil
from typing import Callable

import numpy as np
import xxhash

from airflow_provider_dj.core import fs as storage
from airflow_provider_dj.core.write_roots import check_write
from airflow_provider_dj.engine.output.errors import ExportMismatchError
from airflow_provider_dj.engine.output.hashing import HashingWriter

MANIFEST_FORMAT = "dj-airflow-export-shards"
MANIFEST_VERSION = 1
MANIFEST_SUFFIX = ".manifest.json"
#: The manifest's ``layout`` for ``export_layout: partition_shards`` (absent: Data-Juicer's size rule).
PARTITION_LAYOUT = "partition_shards"


def shard_count(nbytes: float, rows: int, shard_size: int) -> int:
    """Data-Juicer's shard count for an export of ``rows`` rows and ``nbytes`` Arrow bytes."""
    return min(int(nbytes / shard_size) + 1, rows)


def shard_bounds(rows: int, count: int) -> list[tuple[int, int]]:
    """Each shard's [start, end) rows: contiguous, sizes differing by at most one, larger first."""
    div, mod = divmod(rows, count) if count else (0, 0)
    bounds, start = [], 0
    for i in range(count):
        end = start + div + (1 if i < mod else 0)
        bounds.append((start, end))
        start = end
    return bounds


def _stem_and_dir(export_path: str) -> tuple[str, str, str]:
    """(directory, stem, suffix) of Data-Juicer's shard names for ``export_path``."""
    directory, name = storage.dirname(export_path), storage.basename(export_path)
    suffix = name.rsplit(".", 1)[-1].lower()
    scheme = export_path.split("://", 1)[0].lower() if storage.is_url(export_path) else ""
    stem = name.rsplit(".", 1)[0] if scheme in ("s3", "hdfs") else name.split(".")[0]
    return directory, stem, suffix


def shard_names(export_path: str, count: int) -> list[str]:
    """The shard file names (no directory) Data-Juicer writes for ``count`` shards."""
    _, stem, suffix = _stem_and_dir(export_path)
    width = len(str(count)) + 1
    return [f"{stem}-{i:0{width}d}-of-{count:0{width}d}.{suffix}" for i in range(count)]


def manifest_path(export_path: str) -> str:
    """Where the manifest of ``export_path``'s shard set lies: beside the shards."""
    directory, stem, _ = _stem_and_dir(export_path)
    return storage.join(directory, f"{stem}{MANIFEST_SUFFIX}")


def _retiring_path(manifest: str) -> str:
    return storage.join(storage.dirname(manifest), f".{storage.basename(manifest)}.retiring")


def read_manifest(path: str) -> dict | None:
    """The manifest at ``path``; None when there is none or it is not one of ours."""
    try:
        data = json.loads(storage.read_bytes(path))
    except (FileNotFoundError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("format") != MANIFEST_FORMAT:
        return None
    return data


class ShardSetWriter:
    """Writes one export as Data-Juicer's shard files, committed as a set (see the module docstring).

    JSONL: ``write`` takes the export's bytes in order (one row per line, as the engine's JSONL writer
    emits them) and cuts them into shards at row boundaries, so the shards concatenated are the
    single-file export byte for byte.  Parquet: ``write_table`` once per shard, in order."""

    def __init__(
        self,
        export_path: str,
        bounds: list[tuple[int, int]],
        *,
        job_id: str,
        shard_size: int,
        partition_ids: list[int] | None = None,
    ) -> None:
        """``partition_ids``: for ``export_layout: partition_shards``, the partition of each shard (its
        manifest entry names it, and the shards are made read-only)."""
        self.export_path, self.job_id, self.shard_size = export_path, job_id, shard_size
        self.partition_ids = partition_ids
        self.directory = storage.dirname(export_path)
        self.manifest = manifest_path(export_path)
        self.names = shard_names(export_path, len(bounds))
        self.targets = [end - start for start, end in bounds]
        self.staged = [storage.join(self.directory, f".{n}.staged-{job_id}") for n in self.names]
        if storage.exists(self.manifest) and read_manifest(self.manifest) is None:
            raise ExportMismatchError(
                f"{self.manifest} exists and is not a shard manifest this engine wrote; the sharded export "
                f"of {export_path} commits its set under that name. Move the file or change export_path"
            )
        self.shards: list[dict] = []
        self._index = -1
        self._rows = 0
        self._hash = xxhash.xxh3_128()
        self._bytes = 0
        self._writer: storage.AtomicFileWriter | None = None
        self._fh = None

    def _open_next(self) -> None:
        self._index += 1
        self._rows, self._bytes, self._hash = 0, 0, xxhash.xxh3_128()
        what = f"shard {self.names[self._index]} of the export"
        self._writer = storage.AtomicFileWriter(self.staged[self._index], tmp_tag=self.job_id, what=what)
        self._fh = self._writer.__enter__()

    def _close_current(self) -> None:
        writer, self._writer, self._fh = self._writer, None, None
        writer.__exit__(None, None, None)
        self._record(self._rows, self._bytes, self._hash.hexdigest())

    def _record(self, rows: int, nbytes: int, digest: str) -> None:
        shard = {"file": self.names[self._index], "rows": rows, "bytes": nbytes, "xxh3_128": digest}
        if self.partition_ids is not None:
            shard["partition_id"] = self.partition_ids[self._index]
            _read_only(self.staged[self._index])
        self.shards.append(shard)

    def link_next(self, source: str, *, rows: int, nbytes: int, digest: str) -> str:
        """Make the next shard the file ``source`` (an earlier export's shard whose bytes, ``nbytes``
        long with xxh3 ``digest``, the caller has verified, or a parallel worker's part file with the
        size and xxh3 it recorded while writing it): a hard link where the file system allows, else a
        copy in the kernel.  Returns ``"linked"`` or ``"copied"``.  Local files only; the file is made
        read-only under both names."""
        if self._fh is not None or self._index + 1 >= len(self.targets) or self.targets[self._index + 1] != rows:
            raise ValueError(f"{source} ({rows} rows) is not the next shard of the export")
        self._index += 1
        staged = self.staged[self._index]
        how = _link_or_copy(source, staged, what=f"shard {self.names[self._index]} of the export")
        if os.stat(staged).st_size != nbytes:
            raise ExportMismatchError(f"{source} changed while it was linked into the export; run the export again")
        self._record(rows, nbytes, digest)
        return how

    def _put(self, data) -> None:
        self._fh.write(data)
        self._hash.update(data)
        self._bytes += len(data)

    def write(self, data) -> int:
        """Append export bytes; a shard is closed as soon as it holds its rows."""
        view = memoryview(data).cast("B")
        ends = np.flatnonzero(np.frombuffer(view, dtype=np.uint8) == 10)  # one row ends at each newline
        pos = used = 0
        while pos < len(view):
            if self._fh is None:
                if self._index + 1 >= len(self.targets):
                    raise ValueError("the export holds more rows than its shards were planned for")
                self._open_next()
            need = self.targets[self._index] - self._rows
            if len(ends) - used < need:
                self._put(view[pos:])
                self._rows += len(ends) - used
                break
            cut = int(ends[used + need - 1]) + 1
            self._put(view[pos:cut])
            self._rows += need
            used, pos = used + need, cut
            self._close_current()
        return len(view)

    def flush(self) -> None:
        if self._fh is not None:
            self._fh.flush()

    def write_table(self, table, total_hash, write: Callable) -> None:
        """Write the next shard from ``table`` with ``write(table, file)``; ``total_hash`` (an xxh3 of
        the whole set) sees its bytes too."""
        self._open_next()
        counter = HashingWriter(HashingWriter(self._fh, total_hash), self._hash)
        write(table, counter)
        self._rows, self._bytes = table.num_rows, counter.n
        self._close_current()

    def abort(self, exc: BaseException | None = None) -> Exception | None:
        """Remove every staged shard of this attempt; the previous set and its manifest stay as they were.

        Returns the disk-full error naming the shard when ``exc`` is the disk filling up mid-shard."""
        failure = None
        if self._writer is not None:
            writer, self._writer, self._fh = self._writer, None, None
            try:
                writer.__exit__(type(exc) if exc else RuntimeError, exc, None)
            except OSError as err:
                failure = err
        for path in self.staged:
            storage.remove(path)
        return failure

    def commit(self, *, total_rows: int, checksum: str, before_manifest: Callable[[], None] | None = None) -> dict:
        """Publish the staged shards as the current set; return the manifest written (last).

        ``before_manifest`` runs after the shards are in place and before the manifest is written
        (a fault point for tests)."""
        if len(self.shards) != len(self.names) or sum(s["rows"] for s in self.shards) != total_rows:
            raise ValueError(
                f"the export wrote {len(self.shards)} of {len(self.names)} shards "
                f"({sum(s['rows'] for s in self.shards)} of {total_rows} rows)"
            )
        retiring = self._retire_previous()
        for staged, name in zip(self.staged, self.names):
            storage.rename(staged, storage.join(self.directory, name))
            if not storage.is_url(staged) and os.path.lexists(staged):
                # Two names of one file (a shard linked from the one it replaces): rename does nothing.
                os.unlink(staged)
        if before_manifest is not None:
            before_manifest()
        manifest = {
            "format": MANIFEST_FORMAT,
            "version": MANIFEST_VERSION,
            "job_id": self.job_id,
            "export_path": self.export_path,
            "export_shard_size": self.shard_size,
            "total_rows": total_rows,
            "total_bytes": sum(s["bytes"] for s in self.shards),
            "checksum_xxh3_128": checksum,
            "shards": self.shards,
            **({"layout": PARTITION_LAYOUT} if self.partition_ids is not None else {}),
        }
        data = (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode()
        storage.atomic_write_bytes(self.manifest, data, what="the export's shard manifest")
        self._remove_retired(retiring)
        return manifest

    def _retire_previous(self) -> list[str]:
        """Take the previous manifest down, keeping the names of its shards in the retiring record."""
        record = _retiring_path(self.manifest)
        old = read_manifest(self.manifest)
        try:
            names = list(json.loads(storage.read_bytes(record)).get("files", []))
        except (FileNotFoundError, ValueError, AttributeError):
            names = []
        if old is not None:
            names = sorted(set(names) | {s["file"] for s in old.get("shards", [])})
            storage.atomic_write_bytes(record, json.dumps({"files": names}).encode(), what="the retiring record")
            storage.remove(self.manifest)
        return names

    def _remove_retired(self, names: list[str]) -> None:
        keep = set(self.names)
        for name in names:
            if name not in keep and posixpath.basename(name) == name:
                storage.remove(storage.join(self.directory, name))
        storage.remove(_retiring_path(self.manifest))


def _read_only(path: str) -> None:
    if not storage.is_url(path):
        os.chmod(path, 0o444)


def _copy_in_kernel(src, dst) -> None:
    """Copy the file ``src`` into the empty file ``dst``: ``os.copy_file_range`` (no user-space copy; a
    reflink on file systems that share extents), or plain reads and writes where the kernel refuses."""
    left, off = os.fstat(src.fileno()).st_size, 0
    try:
        while left > 0:
            n = os.copy_file_range(src.fileno(), dst.fileno(), left, off, off)
            if n == 0:
                break
            off, left = off + n, left - n
    except OSError:  # an older kernel, or two file systems it will not copy between
        src.seek(0)
        dst.seek(0)
        dst.truncate()
        shutil.copyfileobj(src, dst, 16 << 20)


def _link_or_copy(source: str, target: str, *, what: str = "a shard of the export") -> str:
    """``target`` becomes ``source``'s file: a hard link, or (another file system, no links) a copy made
    by ``os.copy_file_range`` and synced.  Read-only either way.  A disk-full error in the copy names
    ``what`` and leaves no partial file."""
    check_write(target)
    if os.path.lexists(target):  # a crashed attempt's leftover
        os.unlink(target)
    try:
        os.link(source, target)
        how = "linked"
    except OSError as exc:
        if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EOPNOTSUPP):
            raise
        copying = target + ".copying"
        try:
            with open(source, "rb") as src, open(copying, "wb") as dst:
                _copy_in_kernel(src, dst)
                os.fsync(dst.fileno())
            os.replace(copying, target)
        except OSError as err:  # the half copy is not a staged shard: nobody else would remove it
            storage.remove(copying)
            if storage.is_full(err):
                raise storage.full_error(err, target, what) from err
            raise
        how = "copied"
    _read_only(target)
    return how


def retire_shard_set(export_path: str) -> list[str]:
    """After a single-file export of ``export_path``: take down a shard set an earlier sharded export of
    the same path committed (its manifest first, then the shards it names), so it no longer looks
    current beside the new file.  Returns the files removed; a manifest that is not ours or names
    another export path is left alone."""
    path = manifest_path(export_path)
    manifest = read_manifest(path)
    if manifest is None or manifest.get("export_path") != export_path:
        return []
    storage.remove(path)
    directory, removed = storage.dirname(path), [storage.basename(path)]
    for shard in manifest.get("shards", []):
        name = shard.get("file", "")
        if name and posixpath.basename(name) == name:
            storage.remove(storage.join(directory, name))
            removed.append(name)
    return removed


def verify_shard_set(summary_export: dict) -> None:
    """Re-check a completed sharded export: the manifest is the job's, and every shard's size and xxh3
    match it.  Raises ExportMismatchError naming the first file that does not."""
    manifest_file = summary_export["manifest"]
    manifest = read_manifest(manifest_file)
    if manifest is None or manifest.get("shards") != summary_export["shards"]:
        raise ExportMismatchError(
            f"the export's manifest {manifest_file} is missing or names other shards than this job wrote; "
            f"nothing was rewritten: restore the set or start a new job"
        )
    directory = storage.dirname(manifest_file)
    for shard in manifest["shards"]:
        path = storage.join(directory, shard["file"])
        h, n = xxhash.xxh3_128(), 0
        try:
            with storage.open_read(path) as fh:
                for chunk in storage.iter_chunks(fh):
                    h.update(chunk)
                    n += len(chunk)
        except FileNotFoundError:
            raise ExportMismatchError(f"shard {path} of the export is missing; restore it or start a new job") from None
        if n != shard["bytes"] or h.hexdigest() != shard["xxh3_128"]:
            raise ExportMismatchError(
                f"shard {path} changed since the export ({n} bytes, xxh3 {h.hexdigest()}; the manifest "
                f"recorded {shard['bytes']} bytes, xxh3 {shard['xxh3_128']}); restore it or start a new job"
            )


__all__ = [
    "MANIFEST_FORMAT",
    "PARTITION_LAYOUT",
    "ShardSetWriter",
    "manifest_path",
    "read_manifest",
    "retire_shard_set",
    "shard_bounds",
    "shard_count",
    "shard_names",
    "verify_shard_set",
]
