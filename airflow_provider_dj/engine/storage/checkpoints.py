"""Per-op, per-partition checkpoints that are either absent or complete (invariant 1).

Layout under ``{job}/checkpoints/``::

    checkpoint_op_{i:03d}_{op_name}/partition_{p:05d}.{parquet|arrow|jsonl[.gz]}
    checkpoint_op_{i:03d}_{op_name}/partition_{p:05d}.commit.json

The data file is written first (atomically), the commit marker last.  The
marker records the byte size and xxh3 checksum of the data file, the op
index it follows, the partition's input hash, the pipeline fingerprint of
ops 0..i, and the row accounting so far.  A checkpoint is trusted only if
its marker exists, parses, matches the expected partition hash and
fingerprint, and the data file's size and checksum match: a truncated file,
a missing marker or a checkpoint from a different input or recipe are all
ignored (and recomputed), never loaded.

Integrity is checked on every load, not only the size: the whole data file
is re-hashed (xxh3, far faster than the disk), and so is every ``failed/``
file the marker's accounting records (``failed_file``: the samples an op set
aside are part of what the checkpoint claims) and every media file an op wrote
that the rows name (``media_manifest``: a blurred image is part of the rows).  A checkpoint whose bytes
changed after commit is *rejected*: the warning and a ``checkpoint_rejected``
event name its path, and its marker is renamed to
``partition_XXXXX.commit.json.rejected-<time>`` (nothing is deleted), so
every cheap marker-only check (sensors, the global step, the export, resume)
sees it as absent too and the owning task recomputes it instead of trusting
or skipping it.  A checkpoint from another input or pipeline is merely
ignored, not rejected: it is not damaged.

A checkpoint may be a *delta* on the checkpoint just before it: after a
filter or a global keep mask, the keep flags plus the columns the op set (its
stats); after a mapper, the new values of the rows it changed plus a flag
column per patched column.  The commit marker says ``delta``.  It is rebuilt
from that base on load and is valid only while the base is; retention removes
a partition's checkpoints together, so a base never goes before its deltas.
"""

from __future__ import annotations

import io
import json
import logging
import time
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.feather as feather
import pyarrow.parquet as pq

from airflow_provider_dj import settings
from airflow_provider_dj.core import fs as storage
from airflow_provider_dj.engine.jobdir.integrity import file_digest
from airflow_provider_dj.engine.jobdir.layout import (
    CHECKPOINT_STORE,
    CHECKPOINTS_DIR,
    DEDUP_KEYS_STORE,
    DEDUP_MASK_STORE,
    partition_name,
    read_json,
    store_op_dir_name,
)
from airflow_provider_dj.ops.columns import DELTA_KEEP_COLUMN, DELTA_SET_PREFIX

log = logging.getLogger(__name__)

MARKER_SUFFIX = ".commit.json"
PATCH_FLAG_PREFIX = DELTA_SET_PREFIX  # + column name: which rows of a patched column the op changed
MAX_DELTA_CHAIN = 64  # deltas stack one per op; a longer chain means a corrupt marker loop
REJECTED_SUFFIX = ".rejected-"  # + epoch seconds, after MARKER_SUFFIX: a marker whose checkpoint failed its checks


@dataclass(frozen=True)
class StorageFormat:
    format: str = "parquet"  # parquet | arrow | jsonl
    compression: str = "snappy"  # parquet: snappy|gzip|zstd|none; arrow: zstd|none; jsonl: gzip|zstd|none

    @property
    def extension(self) -> str:
        if self.format == "jsonl":
            return {"gzip": "jsonl.gz", "zstd": "jsonl.zst"}.get(self.compression, "jsonl")
        return self.format

    def encode(self, table: pa.Table) -> bytes:
        buf = io.BytesIO()
        if self.format == "parquet":
            comp = None if self.compression == "none" else self.compression
            # Checkpoints are read back whole by this engine, never filtered by a query engine: column
            # statistics (min/max of long texts) and dictionary attempts on mostly unique text cost
            # 15 % of the encode time and buy nothing here (docs/benchmarks_gathered.md).
            pq.write_table(table, buf, compression=comp, use_dictionary=False, write_statistics=False)
        elif self.format == "arrow":
            comp = "uncompressed" if self.compression == "none" else self.compression
            feather.write_feather(table, buf, compression=comp)
        elif self.format == "jsonl":
            from airflow_provider_dj.engine.storage.jsonl_writer import write_jsonl

            write_jsonl(table, buf)
            if self.compression == "gzip":
                import gzip

                return gzip.compress(buf.getvalue(), mtime=0)
            if self.compression == "zstd":
                import zstandard

                return zstandard.ZstdCompressor().compress(buf.getvalue())
        else:  # pragma: no cover - validated in the recipe
            raise ValueError(f"unknown checkpoint format {self.format!r}")
        return buf.getvalue()

    def decode(self, data: bytes) -> pa.Table:
        if self.format == "parquet":
            return pq.read_table(pa.BufferReader(data))
        if self.format == "arrow":
            return feather.read_table(pa.BufferReader(data))
        import gzip

        import pyarrow.json as pajson

        if self.compression == "gzip":
            raw = gzip.decompress(data)
        elif self.compression == "zstd":
            import zstandard

            raw = zstandard.ZstdDecompressor().decompressobj().decompress(data)
        else:
            raw = data
        if not raw.strip():
            return pa.table({})
        return pajson.read_json(io.BytesIO(raw))


@dataclass
class LoadedCheckpoint:
    op_index: int
    table: pa.Table
    marker: dict


def _marker_identity(op_index: int, op_name: str, partition_id: int, partition_hash: str, fingerprint: str) -> dict:
    """What a commit marker says the checkpoint is: the state after op ``op_index`` of these rows, made by
    this op chain.  The same keys open a marker of the checkpoint's own data and one that refers to
    another job's (nightly reuse), so a resume checks both alike."""
    return {
        "op_index": op_index,
        "op_name": op_name,
        "partition_id": partition_id,
        "partition_hash": partition_hash,
        "pipeline_fingerprint": fingerprint,
    }


class CheckpointStore:
    def __init__(self, job_dir: str, fmt: StorageFormat | None = None, prefix: str = CHECKPOINT_STORE) -> None:
        """``prefix`` separates kinds of per-partition state: op outputs
        (``checkpoint_op``), deduplicator keys (``dedup_keys_op``) and the
        global step's keep masks (``dedup_mask_op``) share the same commit
        protocol."""
        self.job_dir = job_dir
        self.root = storage.join(job_dir, CHECKPOINTS_DIR)
        self.fmt = fmt or StorageFormat()
        self.prefix = prefix
        self._faults: list[dict] | None = None
        #: Bytes of committed data files read by load_valid (the summary's reused bytes).
        self.bytes_loaded = 0

    @property
    def kind(self) -> str:
        """What this store holds, in words, for messages."""
        return {CHECKPOINT_STORE: "checkpoint", DEDUP_KEYS_STORE: "dedup keys", DEDUP_MASK_STORE: "keep mask"}.get(
            self.prefix, self.prefix
        )

    # -- paths ------------------------------------------------------------
    def op_dir(self, op_index: int, op_name: str) -> str:
        return storage.join(self.root, store_op_dir_name(self.prefix, op_index, op_name))

    def data_path(self, op_index: int, op_name: str, partition_id: int) -> str:
        return storage.join(self.op_dir(op_index, op_name), f"{partition_name(partition_id)}.{self.fmt.extension}")

    def marker_path(self, op_index: int, op_name: str, partition_id: int) -> str:
        return storage.join(self.op_dir(op_index, op_name), f"{partition_name(partition_id)}{MARKER_SUFFIX}")

    # -- write ------------------------------------------------------------
    def save(
        self,
        *,
        op_index: int,
        op_name: str,
        partition_id: int,
        table: pa.Table,
        partition_hash: str,
        fingerprint: str,
        accounting: list[dict],
        extra: dict | None = None,
        num_rows: int | None = None,
    ) -> str:
        data = self.fmt.encode(table)
        path = self.data_path(op_index, op_name, partition_id)
        what = f"the {self.kind} of op {op_index} ({op_name}) partition {partition_id}"
        storage.atomic_write_bytes(path, data, what=what)
        if self._faults is None:
            from airflow_provider_dj.engine.jobdir import faults as _f

            self._faults = _f.load_faults(self.job_dir)
        if self._faults:
            from airflow_provider_dj.engine.jobdir import faults as _f

            _f.maybe_fail(
                self.job_dir, self._faults, partition_id, op_index, point="checkpoint_mid_write", store=self.prefix
            )
        marker = {
            **_marker_identity(op_index, op_name, partition_id, partition_hash, fingerprint),
            "format": self.fmt.format,
            "compression": self.fmt.compression,
            "data_file": storage.basename(path),
            "size": len(data),
            "checksum": file_digest(data),
            "num_rows": table.num_rows if num_rows is None else num_rows,
            "accounting": accounting,
            "committed_at": time.time(),
        }
        if extra:
            marker.update(extra)
        storage.atomic_write_bytes(
            self.marker_path(op_index, op_name, partition_id),
            json.dumps(marker).encode(),
            what=f"the commit marker of {what[4:]}",
        )
        return path

    @property
    def supports_delta(self) -> bool:
        """Parquet and Arrow only (typed columns round-trip exactly; JSONL's would not), and not when
        ``DJ_DELTA_CHECKPOINTS=0`` asks for whole tables (e.g. to read checkpoints with other tools)."""
        return self.fmt.format in ("parquet", "arrow") and settings.get("delta_checkpoints")

    def save_delta(
        self,
        *,
        op_index: int,
        op_name: str,
        partition_id: int,
        keep: pa.Array,
        columns: pa.Table,
        out_columns: list[str],
        out_rows: int,
        base_op_index: int,
        base_op_name: str,
        base_fingerprint: str,
        partition_hash: str,
        fingerprint: str,
        accounting: list[dict],
        depth: int = 1,
    ) -> str:
        """A checkpoint stored as a delta on the committed checkpoint of the state before it.

        After a filter or a global keep mask the output is the input's rows
        minus some, plus a stats column: store the keep flags and the set
        columns (one row per *input* row) instead of every text again.
        Loading rebuilds the table from the base checkpoint
        (:meth:`load_valid`), so a delta is valid only while its base is.
        """
        stored = (
            columns.append_column(DELTA_KEEP_COLUMN, keep)
            if columns.num_columns
            else pa.table({DELTA_KEEP_COLUMN: keep})
        )
        delta = {
            "base_op_index": base_op_index,
            "base_op_name": base_op_name,
            "base_fingerprint": base_fingerprint,
            "base_rows": len(keep),
            "columns": list(out_columns),
            "depth": depth,
        }
        return self.save(
            op_index=op_index,
            op_name=op_name,
            partition_id=partition_id,
            table=stored,
            partition_hash=partition_hash,
            fingerprint=fingerprint,
            accounting=accounting,
            extra={"delta": delta},
            num_rows=out_rows,
        )

    def save_reference(
        self,
        *,
        op_index: int,
        op_name: str,
        partition_id: int,
        source_job_id: str,
        source_partition_id: int,
        source_marker: dict,
        partition_hash: str,
        fingerprint: str,
    ) -> str:
        """Commit a checkpoint that is another job's committed checkpoint of the same rows (nightly reuse).

        Only a marker is written; its data stays in the source job and is read in place.  Loading it
        makes every check a resume makes on the source's checkpoint (:meth:`load_valid`), so a source
        that was deleted or damaged since makes this checkpoint absent, never trusted."""
        marker = {
            **_marker_identity(op_index, op_name, partition_id, partition_hash, fingerprint),
            "format": source_marker.get("format"),
            "compression": source_marker.get("compression"),
            "num_rows": source_marker.get("num_rows"),
            "accounting": source_marker.get("accounting", []),
            "reference": {"job_id": source_job_id, "partition_id": source_partition_id},
            "committed_at": time.time(),
        }
        path = self.marker_path(op_index, op_name, partition_id)
        storage.atomic_write_bytes(
            path,
            json.dumps(marker).encode(),
            what=f"the reuse marker of the {self.kind} of op {op_index} ({op_name}) partition {partition_id}",
            durable=False,  # lost after a power cut, the partition is reused or computed again
        )
        return path

    def reference_store(self, marker: dict) -> CheckpointStore:
        """The store of the job a reuse marker points at (same kind, the source's format)."""
        job_dir = storage.join(storage.dirname(self.job_dir), marker["reference"]["job_id"])
        return CheckpointStore(job_dir, StorageFormat(marker["format"], marker["compression"]), prefix=self.prefix)

    def _load_reference(
        self, op_index: int, op_name: str, partition_id: int, partition_hash: str, fingerprint: str, marker: dict
    ) -> LoadedCheckpoint | None:
        ref = marker.get("reference") or {}
        where = f"{self.kind} op {op_index} ({op_name}) partition {partition_id}"
        if not ref.get("job_id") or storage.basename(self.job_dir) == ref.get("job_id"):
            self._reject(op_index, op_name, partition_id, marker, "", f"its reuse marker is malformed ({ref})")
            return None
        source = self.reference_store(marker)
        loaded = source.load_valid(op_index, op_name, int(ref.get("partition_id", -1)), partition_hash, fingerprint)
        self.bytes_loaded += source.bytes_loaded
        if loaded is None or loaded.table.num_rows != marker.get("num_rows"):
            self._reject(
                op_index,
                op_name,
                partition_id,
                marker,
                source.job_dir,
                f"the reused {where} of job {ref['job_id']} is missing, changed or invalid",
            )
            return None
        return LoadedCheckpoint(op_index=op_index, table=loaded.table, marker=marker)

    def _apply_delta(
        self, stored: pa.Table, delta: dict, partition_id: int, partition_hash: str, where: str, depth: int
    ) -> pa.Table | None:
        base = self.load_valid(
            delta["base_op_index"],
            delta["base_op_name"],
            partition_id,
            partition_hash,
            delta["base_fingerprint"],
            _depth=depth + 1,
        )
        if base is None:
            log.warning(
                "ignoring %s: the checkpoint it is a delta of (op %s) is missing or invalid",
                where,
                delta["base_op_index"],
            )
            return None
        if stored.num_rows != base.table.num_rows or stored.num_rows != delta.get("base_rows"):
            log.warning(
                "ignoring %s: its delta covers %d rows, its base has %d", where, stored.num_rows, base.table.num_rows
            )
            return None
        out = base.table
        for name in stored.column_names:
            if name == DELTA_KEEP_COLUMN or name.startswith(PATCH_FLAG_PREFIX):
                continue
            idx = out.schema.get_field_index(name)
            col = stored.column(name)
            flag = PATCH_FLAG_PREFIX + name
            if flag in stored.column_names:  # a patch: new values on the flagged rows, the base's elsewhere
                col = pc.if_else(stored.column(flag), col, out.column(idx))
            out = out.set_column(idx, name, col) if idx >= 0 else out.append_column(name, col)
        return out.filter(stored.column(DELTA_KEEP_COLUMN)).select(delta["columns"])

    # -- read -------------------------------------------------------------
    def read_marker(self, op_index: int, op_name: str, partition_id: int) -> dict | None:
        mpath = self.marker_path(op_index, op_name, partition_id)
        try:
            return read_json(mpath)
        except FileNotFoundError:
            return None
        except (ValueError, OSError) as exc:
            log.warning("ignoring unreadable checkpoint marker %s: %s", mpath, exc)
            return None

    def load_valid(
        self,
        op_index: int,
        op_name: str,
        partition_id: int,
        partition_hash: str,
        fingerprint: str,
        _depth: int = 0,
    ) -> LoadedCheckpoint | None:
        """The checkpoint if it is complete and derives from this input and pipeline, else None.

        A delta checkpoint is rebuilt from its base, which must itself be valid."""
        checked = self._checked(op_index, op_name, partition_id, partition_hash, fingerprint, _depth)
        if checked is None:
            return None
        marker, data, path = checked
        if marker.get("reference") is not None:
            return self._load_reference(op_index, op_name, partition_id, partition_hash, fingerprint, marker)
        where = f"checkpoint op {op_index} ({op_name}) partition {partition_id}"
        try:
            table = StorageFormat(marker["format"], marker["compression"]).decode(data)
        except Exception as exc:  # noqa: BLE001 - corrupt despite matching checksum: treat as absent
            self._reject(op_index, op_name, partition_id, marker, path, f"it cannot be decoded ({exc})")
            return None
        if marker.get("delta") is not None:
            table = self._apply_delta(table, marker["delta"], partition_id, partition_hash, where, _depth)
            if table is None:
                return None
        if table.num_rows != marker.get("num_rows"):
            self._reject(
                op_index,
                op_name,
                partition_id,
                marker,
                path,
                f"it holds {table.num_rows} rows, the commit marker recorded {marker.get('num_rows')}",
            )
            return None
        return LoadedCheckpoint(op_index=op_index, table=table, marker=marker)

    def verify_valid(
        self, op_index: int, op_name: str, partition_id: int, partition_hash: str, fingerprint: str, _depth: int = 0
    ) -> dict | None:
        """The commit marker if the checkpoint passes every integrity check short of decoding it, else None.

        The same checks as :meth:`load_valid` — marker, content hash, fingerprint, size and xxh3 of the
        data file and of the ``failed/`` files it counts, down every delta base and reuse reference —
        for a caller that needs no rows (a reused segment output that the next reader decodes with
        load_valid anyway).  A failure rejects the checkpoint exactly as load_valid does."""
        checked = self._checked(op_index, op_name, partition_id, partition_hash, fingerprint, _depth)
        if checked is None:
            return None
        marker = checked[0]
        ref = marker.get("reference")
        if ref is not None:
            if not ref.get("job_id") or storage.basename(self.job_dir) == ref.get("job_id"):
                self._reject(op_index, op_name, partition_id, marker, "", f"its reuse marker is malformed ({ref})")
                return None
            source = self.reference_store(marker)
            ok = source.verify_valid(op_index, op_name, int(ref.get("partition_id", -1)), partition_hash, fingerprint)
            self.bytes_loaded += source.bytes_loaded
            if ok is None or ok.get("num_rows") != marker.get("num_rows"):
                self._reject(op_index, op_name, partition_id, marker, source.job_dir, "its reused source is invalid")
                return None
            return marker
        delta = marker.get("delta")
        if delta is not None:
            base = self.verify_valid(
                delta["base_op_index"],
                delta["base_op_name"],
                partition_id,
                partition_hash,
                delta["base_fingerprint"],
                _depth + 1,
            )
            if base is None or base.get("num_rows") != delta.get("base_rows"):
                return None
        return marker

    def _checked(
        self, op_index: int, op_name: str, partition_id: int, partition_hash: str, fingerprint: str, _depth: int
    ) -> tuple[dict, bytes, str] | None:
        """(marker, data file bytes, path) of a committed checkpoint of this input and pipeline whose bytes
        are as committed; None (rejecting a damaged one) otherwise.  A reuse marker has no data here (b"")."""
        if _depth > MAX_DELTA_CHAIN:
            log.warning(
                "ignoring checkpoint op %d partition %d: delta chain longer than %d",
                op_index,
                partition_id,
                MAX_DELTA_CHAIN,
            )
            return None
        marker = self.read_marker(op_index, op_name, partition_id)
        if marker is None:
            return None
        where = f"checkpoint op {op_index} ({op_name}) partition {partition_id}"
        if marker.get("partition_hash") != partition_hash:
            log.warning("ignoring %s: it derives from a different partition content", where)
            return None
        if marker.get("pipeline_fingerprint") != fingerprint:
            log.warning("ignoring %s: it was written by a different op pipeline", where)
            return None
        if marker.get("reference") is not None:
            return marker, b"", ""
        path = storage.join(self.op_dir(op_index, op_name), marker.get("data_file", ""))
        try:
            data = storage.read_bytes(path)
        except FileNotFoundError:
            self._reject(op_index, op_name, partition_id, marker, path, "its data file is missing")
            return None
        if len(data) != marker.get("size"):
            self._reject(
                op_index,
                op_name,
                partition_id,
                marker,
                path,
                f"its data file has {len(data)} bytes, the commit marker recorded {marker.get('size')} (torn)",
            )
            return None
        self.bytes_loaded += len(data)
        got = file_digest(data)
        if got != marker.get("checksum"):
            self._reject(
                op_index,
                op_name,
                partition_id,
                marker,
                path,
                f"its data file's xxh3 is {got}, the commit marker recorded {marker.get('checksum')} "
                f"(changed after commit)",
            )
            return None
        problem = self._failed_files_problem(marker)
        if problem:
            self._reject(op_index, op_name, partition_id, marker, path, problem)
            return None
        return marker, data, path

    # -- integrity ----------------------------------------------------------
    def _failed_files_problem(self, marker: dict) -> str | None:
        """Why the ``failed/`` files and the media files this checkpoint's accounting records are not as
        committed (None: they are)."""
        from airflow_provider_dj.engine.jobdir.integrity import failed_file_problem, media_files_problem

        for entry in marker.get("accounting") or []:
            problem = failed_file_problem(self.job_dir, entry) or media_files_problem(self.job_dir, entry)
            if problem:
                return problem
        return None

    def _reject(self, op_index: int, op_name: str, partition_id: int, marker: dict, path: str, why: str) -> None:
        """A committed checkpoint failed its integrity checks: say so with its path, and demote it.

        The marker is renamed (not deleted), so marker-only checks stop counting
        the checkpoint as committed and the task that owns it recomputes it; the
        data file stays for inspection until that recomputation overwrites it."""
        mpath = self.marker_path(op_index, op_name, partition_id)
        msg = (
            f"rejecting the committed {self.kind} of op {op_index} ({op_name}) partition {partition_id} at "
            f"{path}: {why}; it will be recomputed, not loaded"
        )
        log.warning("%s", msg)
        try:
            if self.read_marker(op_index, op_name, partition_id) == marker:  # not already recommitted meanwhile
                storage.rename(mpath, f"{mpath}{REJECTED_SUFFIX}{int(time.time())}")
        except OSError as exc:  # the rejection itself stands; only the demotion failed
            log.warning("could not set the rejected commit marker %s aside: %s", mpath, exc)
        try:
            from airflow_provider_dj.engine.jobdir.events import EventLog

            EventLog(self.job_dir, storage.basename(self.job_dir)).emit(
                "checkpoint_rejected",
                partition_id=partition_id,
                op_index=op_index,
                op_name=op_name,
                checkpoint_path=path,
                error_message=why,
                store=self.prefix,
            )
        except OSError as exc:  # e.g. a full disk: the warning above already names the file
            log.warning("could not record the checkpoint_rejected event: %s", exc)

    def is_committed(
        self, op_index: int, op_name: str, partition_id: int, partition_hash: str, fingerprint: str
    ) -> bool:
        """Cheap check (marker only) used by sensors and planners."""
        m = self.read_marker(op_index, op_name, partition_id)
        return bool(m and m.get("partition_hash") == partition_hash and m.get("pipeline_fingerprint") == fingerprint)
