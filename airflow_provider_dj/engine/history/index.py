"""The history index of a corpus: dedup keys of every row earlier jobs exported, versioned, on disk.

Why versioned: a nightly job must deduplicate against the history *as it was when the job started*.
A retry, a resume or a UI clear of the same night reads the version the job pinned, so the night's own
rows (committed by an earlier try's export) never count as history.  A version is committed only after
a successful export, and only by moving ``CURRENT``; a failed or stopped night leaves the index as it was.

Layout under ``dedup_history.path`` (one directory per corpus)::

    CURRENT                             {"version": N}, replaced atomically (temp + rename): the commit point
    LOCK                                flock target: one commit at a time (compare-and-swap under it)
    versions/v000N/manifest.json        every shard of version N (+ entries, bytes, xxh3) and the job table
    versions/v000N/<op>/shard_XX.bin    the entries version N *added* for key prefix XX (00..ff)

Copy-on-write: version N's manifest lists its parent's shard files plus its own delta files, so a commit
writes O(new rows) and never copies an older shard.  Nothing is ever deleted, so every version stays
readable (a manifest is a few KB) and the version pinned by a running job can never disappear.

Entry: ``(k0, k1, job, row)`` packed little-endian, 28 bytes: the 128-bit key as two uint64 words, the
index of the job in the manifest's job table, and the row's position in that job's export.  A shard file
is sorted by ``(k0, k1)``.  The prefix of a key is ``k0 & 0xff`` (its first byte): keys are hashes, so the
256 prefixes are evenly filled.

Lookups stream: one shard file at a time, in chunks of at most ``memory_bytes``, so the memory a lookup
needs is bounded by the budget (plus the query keys), whatever the size of the history.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from dataclasses import dataclass, field

import numpy as np
import xxhash

from airflow_provider_dj.core.errors import RefusedError
from airflow_provider_dj.core.write_roots import check_write

ENTRY_DTYPE = np.dtype([("k0", "<u8"), ("k1", "<u8"), ("job", "<u4"), ("row", "<u8")])  # packed: 28 bytes
FORMAT_VERSION = 1
NUM_PREFIXES = 256
CURRENT_FILE = "CURRENT"
LOCK_FILE = "LOCK"
VERSIONS_DIR = "versions"
MANIFEST_FILE = "manifest.json"


class HistoryIndexError(RefusedError, RuntimeError):
    """The history index is damaged or does not fit the recipe; the message says which file and what to do."""


def version_dir_name(version: int) -> str:
    return f"v{version:06d}"


def prefix_of(k0: np.ndarray) -> np.ndarray:
    return (np.asarray(k0, dtype=np.uint64) & np.uint64(0xFF)).astype(np.int64)


@dataclass
class OpAdditions:
    """One op's new entries for a commit: keys (two uint64 words) and export rows, plus what made the keys."""

    key_args: dict
    k0: np.ndarray
    k1: np.ndarray
    rows: np.ndarray


@dataclass
class CommitResult:
    status: str  # committed | already_committed
    version: int
    pinned: int
    base: int
    added: dict[str, int] = field(default_factory=dict)
    note: str | None = None

    def to_dict(self) -> dict:
        return {
            "status": self.status,
            "version": self.version,
            "pinned_version": self.pinned,
            "base_version": self.base,
            "added_entries": self.added,
            **({"note": self.note} if self.note else {}),
        }


class HistoryIndex:
    """One corpus's index directory (local path)."""

    def __init__(self, path: str) -> None:
        self.path = path

    # -- reading --------------------------------------------------------------------------------
    def current_version(self) -> int:
        """The committed version (0: nothing committed yet)."""
        cur = os.path.join(self.path, CURRENT_FILE)
        try:
            with open(cur, "rb") as fh:
                doc = json.loads(fh.read())
        except FileNotFoundError:
            return 0
        except ValueError as exc:
            raise HistoryIndexError(
                f"{cur} is not valid JSON ({exc}); restore it from a backup or write "
                f'{{"version": N}} naming the newest complete versions/v00000N'
            ) from None
        return int(doc["version"])

    def manifest(self, version: int) -> dict:
        """Version ``version``'s manifest (version 0: the empty history)."""
        if version == 0:
            return {"format": FORMAT_VERSION, "version": 0, "jobs": [], "ops": {}}
        path = os.path.join(self.path, VERSIONS_DIR, version_dir_name(version), MANIFEST_FILE)
        try:
            with open(path, "rb") as fh:
                return json.loads(fh.read())
        except FileNotFoundError:
            raise HistoryIndexError(
                f"history version {version} has no manifest ({path}); the index at {self.path} is damaged or "
                f"was moved: restore it, or point dedup_history.path at a new directory (history restarts empty)"
            ) from None

    def check_key_args(self, version: int, op_name: str, key_args: dict) -> None:
        """Refuse a recipe whose op would compute other keys than the ones the history holds."""
        held = self.manifest(version)["ops"].get(op_name)
        if held is not None and held["key_args"] != key_args:
            raise HistoryIndexError(
                f"the history index at {self.path} (version {version}) holds {op_name} keys computed with "
                f"{held['key_args']}, but this recipe's {op_name} computes them with {key_args}: its rows would "
                f"never match history. Use the same arguments, or a new dedup_history.path"
            )

    def lookup(
        self, version: int, op_name: str, k0: np.ndarray, k1: np.ndarray, *, memory_bytes: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """For each query key: ``(job index, export row)`` of its earliest history entry, -1 where none.

        Streams shard files prefix by prefix in chunks of at most ``memory_bytes`` (entries and the
        copies of their key words), and checks each file's xxh3 as it goes."""
        k0 = np.asarray(k0, dtype=np.uint64)
        k1 = np.asarray(k1, dtype=np.uint64)
        job = np.full(len(k0), -1, dtype=np.int64)
        row = np.full(len(k0), -1, dtype=np.int64)
        held = self.manifest(version)["ops"].get(op_name)
        if held is None or not len(k0):
            return job, row
        chunk_entries = max(64, memory_bytes // (ENTRY_DTYPE.itemsize + 16))
        prefixes = prefix_of(k0)
        order = np.argsort(prefixes, kind="stable")
        bounds = np.searchsorted(prefixes[order], np.arange(NUM_PREFIXES + 1))
        for p in range(NUM_PREFIXES):
            sel = order[bounds[p] : bounds[p + 1]]
            files = held["shards"].get(f"{p:02x}")
            if not len(sel) or not files:
                continue
            by_k0 = sel[np.argsort(k0[sel], kind="stable")]
            q0, q1 = k0[by_k0], k1[by_k0]
            for f in files:  # version order: the earliest entry of a key wins
                for chunk in self._chunks(f, chunk_entries):
                    self._match(chunk, q0, q1, by_k0, job, row)
        return job, row

    def _chunks(self, f: dict, chunk_entries: int):
        path = os.path.join(self.path, *f["file"].split("/"))
        h = xxhash.xxh3_128()
        n = int(f["entries"])
        try:
            with open(path, "rb") as fh:
                done = 0
                while done < n:
                    chunk = np.fromfile(fh, dtype=ENTRY_DTYPE, count=min(chunk_entries, n - done))
                    if len(chunk) == 0:
                        break
                    h.update(chunk.tobytes())
                    done += len(chunk)
                    yield chunk
        except FileNotFoundError:
            raise HistoryIndexError(
                f"history shard {path} is missing; the index at {self.path} is damaged: restore it"
            ) from None
        if done != n or h.hexdigest() != f["xxh3_128"]:
            raise HistoryIndexError(
                f"history shard {path} does not match its manifest ({done} of {n} entries, xxh3 {h.hexdigest()} "
                f"vs {f['xxh3_128']}); the index at {self.path} is damaged: restore it"
            )

    @staticmethod
    def _match(chunk: np.ndarray, q0: np.ndarray, q1: np.ndarray, pos: np.ndarray, job, row) -> None:
        c0 = np.ascontiguousarray(chunk["k0"])
        lo = np.searchsorted(c0, q0, "left")
        hi = np.searchsorted(c0, q0, "right")
        open_ = (hi > lo) & (job[pos] < 0)
        if not open_.any():
            return
        c1 = chunk["k1"]
        single = np.flatnonzero(open_ & (hi - lo == 1))
        if len(single):
            at = lo[single]
            ok = c1[at] == q1[single]
            hit, at = pos[single[ok]], at[ok]
            job[hit] = chunk["job"][at]
            row[hit] = chunk["row"][at]
        for i in np.flatnonzero(open_ & (hi - lo > 1)):  # equal first words: rare for hashes
            for j in range(lo[i], hi[i]):
                if c1[j] == q1[i]:
                    job[pos[i]], row[pos[i]] = int(chunk["job"][j]), int(chunk["row"][j])
                    break

    # -- committing -----------------------------------------------------------------------------
    @contextlib.contextmanager
    def _locked(self):
        check_write(self.path)
        os.makedirs(self.path, exist_ok=True)
        with open(os.path.join(self.path, LOCK_FILE), "a+b") as fh:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX)  # released by the kernel if this process dies
            try:
                yield
            finally:
                fcntl.flock(fh.fileno(), fcntl.LOCK_UN)

    def committed_by(self, job_id: str) -> int | None:
        """The version that added ``job_id``'s rows, or None."""
        for j in self.manifest(self.current_version())["jobs"]:
            if j["job_id"] == job_id:
                return int(j["version"])
        return None

    def commit(
        self,
        *,
        job_id: str,
        pinned: int,
        export_path: str,
        additions: dict[str, OpAdditions],
        before_current_moves=None,
    ) -> CommitResult:
        """Add this job's exported rows as a new version and move CURRENT to it (compare-and-swap).

        Idempotent: a job already in the current version's job table adds nothing (a retried export).
        When another job committed after this one pinned its version, the new version builds on the
        newest one (no entry is lost) and the result says so.  ``before_current_moves`` is called after
        the version's files are written and before CURRENT moves (fault injection in tests)."""
        with self._locked():
            base = self.current_version()
            parent = self.manifest(base)
            for j in parent["jobs"]:
                if j["job_id"] == job_id:
                    return CommitResult("already_committed", int(j["version"]), pinned, base)
            note = None
            if base != pinned:
                note = (
                    f"version {base} was committed by another job after this job pinned version {pinned}; "
                    f"this job's rows were checked against version {pinned} and are added on top of version {base}"
                )
            new = base + 1
            vrel = f"{VERSIONS_DIR}/{version_dir_name(new)}"
            vdir = os.path.join(self.path, *vrel.split("/"))
            if os.path.exists(vdir):  # left by a commit that died before moving CURRENT: never referenced
                import shutil

                shutil.rmtree(vdir)
            job_ref = len(parent["jobs"])
            ops = json.loads(json.dumps(parent["ops"]))  # deep copy: the parent's shard lists are shared
            added = {}
            for op_name, add in additions.items():
                held = ops.setdefault(op_name, {"key_args": add.key_args, "entries": 0, "shards": {}})
                if held["key_args"] != add.key_args:
                    raise HistoryIndexError(
                        f"cannot commit {op_name} keys computed with {add.key_args} into the history index at "
                        f"{self.path}, which holds keys computed with {held['key_args']}"
                    )
                added[op_name] = self._write_op_shards(vrel, op_name, add, held, job_ref)
            manifest = {
                "format": FORMAT_VERSION,
                "version": new,
                "parent": base,
                "created_at": time.time(),
                "job_id": job_id,
                "pinned_version": pinned,
                "jobs": parent["jobs"] + [{"job_id": job_id, "export_path": export_path, "version": new}],
                "ops": ops,
            }
            check_write(vdir)
            os.makedirs(vdir, exist_ok=True)
            _write_atomic(os.path.join(vdir, MANIFEST_FILE), json.dumps(manifest, indent=1).encode())
            if before_current_moves is not None:
                before_current_moves()
            _write_atomic(os.path.join(self.path, CURRENT_FILE), json.dumps({"version": new}).encode())
            return CommitResult("committed", new, pinned, base, added, note)

    def _write_op_shards(self, vrel: str, op_name: str, add: OpAdditions, held: dict, job_ref: int) -> int:
        """Write one op's added keys into version ``vrel`` as one sorted shard file per key prefix, and
        list each shard (with its size and xxh3) in the op's manifest entry ``held``; return the
        number of entries added."""
        entries = np.empty(len(add.k0), dtype=ENTRY_DTYPE)
        entries["k0"], entries["k1"] = add.k0, add.k1
        entries["job"], entries["row"] = job_ref, add.rows
        prefixes = prefix_of(entries["k0"])
        order = np.lexsort((entries["k1"], entries["k0"], prefixes))  # by prefix, then key
        entries, prefixes = entries[order], prefixes[order]
        bounds = np.searchsorted(prefixes, np.arange(NUM_PREFIXES + 1))
        vdir = os.path.join(self.path, *vrel.split("/"))
        check_write(os.path.join(vdir, op_name))
        os.makedirs(os.path.join(vdir, op_name), exist_ok=True)
        for p in range(NUM_PREFIXES):
            part = entries[bounds[p] : bounds[p + 1]]
            if not len(part):
                continue
            rel = f"{vrel}/{op_name}/shard_{p:02x}.bin"
            data = part.tobytes()
            _write_atomic(os.path.join(self.path, *rel.split("/")), data)
            held["shards"].setdefault(f"{p:02x}", []).append(
                {
                    "file": rel,
                    "entries": len(part),
                    "bytes": len(data),
                    "xxh3_128": xxhash.xxh3_128_hexdigest(data),
                }
            )
        held["entries"] += len(entries)
        return len(entries)


def _write_atomic(path: str, data: bytes) -> None:
    check_write(path)
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
