"""The work dir's content-addressed index of committed checkpoints, for reuse across jobs.

A nightly job over a grown input finds, for each of its partitions, the checkpoints an earlier job
committed for the *same rows through the same op chain*, and reads them in place instead of
recomputing them (docs/nightly.md, "Reuse across nights").

The key of an entry is everything the checkpoint's content depends on:

* the partition's full-content hash and its first input row (rows carry their input row numbers),
* the op-chain fingerprint up to the op (op names and arguments, ``text_key``: the same fingerprint
  every checkpoint marker records), plus the provider version and each op's
  ``implementation_version`` (an op whose output changes for the same arguments bumps it),
* the store (op output or dedup keys) and its storage format and compression.

Each entry is one small JSON file (``_reuse/index/<aa>/<key>.json``), written atomically by the
job that committed the checkpoint, only after that job exported successfully (invariant 8): two
jobs never write the same file at once except with equally valid content, and a reader never sees
half an entry.  An entry is only a *hint*: the job that follows it loads the checkpoint with
exactly the checks a resume makes (commit marker, content hash, fingerprint, size, checksum); a
missing or corrupt one is never trusted, and the partition is computed instead.

The job that reuses a checkpoint pins its source job (``metadata/reused_from/<job>.json``) before
reading it, so ``dj-airflow gc`` keeps that job while the pin's owner is kept.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import time

import xxhash

from airflow_provider_dj import __version__ as PROVIDER_VERSION
from airflow_provider_dj.core import fs as storage
from airflow_provider_dj.core.write_roots import check_write
from airflow_provider_dj.engine.jobdir.layout import REUSE_PINS_DIR, reuse_gc_lock, reuse_index_dir
from airflow_provider_dj.engine.storage.checkpoints import StorageFormat
from airflow_provider_dj.ops.registry import get_op_class

log = logging.getLogger(__name__)

REUSE_INDEX_VERSION = 1


def chain_fingerprint(plan, op_index: int, fmt: StorageFormat, store_prefix: str) -> str:
    """What a checkpoint after op ``op_index`` depends on besides its input rows (see the module docstring)."""
    impl = []
    for op in plan.ops[: op_index + 1]:
        cls = get_op_class(op.name)
        impl.append([op.name, f"{cls.__module__}.{cls.__qualname__}", int(getattr(cls, "implementation_version", 1))])
    doc = {
        "v": REUSE_INDEX_VERSION,
        "provider": PROVIDER_VERSION,
        "pipeline": plan.ops[op_index].fingerprint,
        "impl": impl,
        "store": store_prefix,
        "format": fmt.format,
        "compression": fmt.compression,
    }
    return xxhash.xxh3_128_hexdigest(json.dumps(doc, sort_keys=True).encode())


def entry_key(partition_hash: str, start_row: int, num_rows: int, op_index: int, chain_fp: str) -> str:
    doc = [partition_hash, int(start_row), int(num_rows), int(op_index), chain_fp]
    return xxhash.xxh3_128_hexdigest(json.dumps(doc).encode())


class ReuseIndex:
    """``{work_dir}/_reuse/index``: key -> where an earlier job committed that checkpoint."""

    def __init__(self, work_dir: str) -> None:
        self.work_dir = work_dir
        self.root = reuse_index_dir(work_dir)

    def path(self, key: str) -> str:
        return storage.join(self.root, key[:2], f"{key}.json")

    def publish(self, key: str, entry: dict) -> None:
        storage.atomic_write_bytes(
            self.path(key),
            json.dumps(dict(entry, published_at=time.time())).encode(),
            what="a reuse-index entry",
            durable=False,  # a hint: lost or empty after a power cut, the partition is computed
        )

    def lookup(self, key: str) -> dict | None:
        try:
            entry = json.loads(storage.read_bytes(self.path(key)))
        except FileNotFoundError:
            return None
        except (ValueError, OSError) as exc:  # a hint only: an unreadable entry means compute
            log.warning("ignoring unreadable reuse-index entry %s: %s", self.path(key), exc)
            return None
        return entry if isinstance(entry, dict) and entry.get("job_id") else None

    def entries(self) -> list[tuple[str, dict]]:
        """Every (path, entry) in the index (gc reads them); unreadable ones as (path, {})."""
        out = []
        for sub in storage.listdir(self.root):
            for name in storage.listdir(storage.join(self.root, sub)):
                if not name.endswith(".json"):
                    continue
                path = storage.join(self.root, sub, name)
                try:
                    out.append((path, json.loads(storage.read_bytes(path))))
                except (ValueError, OSError):
                    out.append((path, {}))
        return out


@contextlib.contextmanager
def gc_guard(work_dir: str, *, exclusive: bool):
    """Pins are written under a shared lock, gc decides and deletes under an exclusive one (local work
    dirs: ``flock`` of ``_reuse/gc.lock``), so gc sees every pin written before it started; a pin
    written after finds the index entries of what gc deleted gone, or the source missing, and the
    partition is computed.  Object stores have no such lock: there gc relies on pins alone."""
    if storage.is_url(work_dir):
        yield
        return
    path = reuse_gc_lock(work_dir)
    check_write(path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def pin_source(job_dir: str, source_job_id: str) -> None:
    """Record in ``job_dir`` that it reads checkpoints of ``source_job_id`` (gc keeps that job)."""
    path = storage.join(job_dir, *REUSE_PINS_DIR.split("/"), f"{source_job_id}.json")
    if storage.exists(path):
        return
    with gc_guard(storage.dirname(job_dir), exclusive=False):
        storage.atomic_write_bytes(path, json.dumps({"job_id": source_job_id, "pinned_at": time.time()}).encode())


def pinned_sources(job_dir: str) -> set[str]:
    """The jobs whose checkpoints ``job_dir`` references."""
    names = storage.listdir(storage.join(job_dir, *REUSE_PINS_DIR.split("/")))
    return {n[: -len(".json")] for n in names if n.endswith(".json")}
