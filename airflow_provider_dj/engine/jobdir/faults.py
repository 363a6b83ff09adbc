"""Deterministic fault injection, for tests and fire drills.

A job directory may hold ``_fault_injection.json``, a list of faults::

    {"point": "after_op", "partition_id": 1, "op_index": 2, "times": 1, "kind": "raise"}

``point`` is where it fires (default ``after_op``; ``after_op`` also accepts
the older key ``after_op: <op index>``):

=========================  ===================================================
``plan``                   after the input is indexed, before the job's metadata is written
``op_start``               before an op runs on a partition
``after_op``               after an op (and its checkpoint, if any) is committed
``checkpoint_mid_write``   after a checkpoint's data file, before its commit marker
``global_mid``             after the first keep mask of a global op is committed
``global_shard``           a sharded global step: after a key shard's edges are written, before
                           its ``done`` marker
``export_mid``             after the first partition is written to the export's temp file
                           (a sharded export: to its staged shards)
``export_commit``          a sharded export: after its shards are renamed into place, before
                           the manifest is written
``history_commit``         after a history version's files are written, before CURRENT moves
``batch_commit``           after batch ``batch`` (0-based; any batch if omitted) of an
                           expensive op is committed to its batch cursor
=========================  ===================================================

``store`` (optional, with ``checkpoint_mid_write``) picks which kind of
checkpoint: ``checkpoint_op`` (op outputs), ``dedup_keys_op`` or
``dedup_mask_op``.

``kind``: ``raise`` (an exception: the task fails and Airflow retries),
``exit`` (this process dies: a crashed worker), or ``kill_run`` (SIGKILL to
every process of this run's session — the CLI, Ray and its workers — like a
``kill -9`` of the whole run or a machine going down).  Firings are counted
with marker files in the job directory, so ``times`` holds across retries,
restarts and nodes.  ``delay`` (with ``seconds``) only sleeps there and goes on:
it holds a job mid-run so a test can kill a node, stop the job or kill a
task at a known point.  With ``until`` (a path relative to the job
directory) the hold ends as soon as that file exists, and ``seconds`` is
only its upper bound: a test holds the job until its own action has
landed (a stop request, say) instead of racing a fixed sleep.  Without the
file this costs one stat per call site.  ``hang`` is a ``delay`` that stands
for a stuck call (a model that never answers): it holds for ``seconds`` (an
hour if omitted), making no progress, until the watchdog
(engine/execution/watchdog.py) or a kill ends it.
"""

from __future__ import annotations

import json
import os
import signal

from airflow_provider_dj.core import fs as storage
from airflow_provider_dj.engine.jobdir.layout import FAULT_FILE
from airflow_provider_dj.engine.jobdir.layout import FAULT_FIRED_DIR as FIRED_DIR


class InjectedFault(RuntimeError):
    """Raised by an injected fault; never raised in a job without a fault file."""


def load_faults(job_dir: str) -> list[dict]:
    path = storage.join(job_dir, FAULT_FILE)
    try:
        return json.loads(storage.read_bytes(path))
    except FileNotFoundError:
        return []


def _matches(
    f: dict, point: str, partition_id: int | None, op_index: int | None, store: str | None, batch: int | None = None
) -> bool:
    fpoint = f.get("point", "after_op")
    if fpoint != point:
        return False
    if f.get("batch") is not None and f.get("batch") != batch:
        return False
    if f.get("store") is not None and f.get("store") != store:
        return False
    want_op = f.get("op_index", f.get("after_op"))
    if want_op is not None and want_op != op_index:
        return False
    want_pid = f.get("partition_id")
    return want_pid is None or want_pid == partition_id


def _kill_session() -> None:
    """SIGKILL every process in this process's session, this one last."""
    sid = os.getsid(0)
    me = os.getpid()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open(f"/proc/{name}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
            if int(fields[3]) == sid:  # field 6 of stat: session id
                os.kill(int(name), signal.SIGKILL)
        except (OSError, IndexError, ValueError):
            continue
    os.kill(me, signal.SIGKILL)


def _hold(job_dir: str, seconds: float, until: str | None) -> None:
    """Sleep ``seconds``, or less when ``until`` (relative to ``job_dir``) is given and appears first."""
    import time

    if until is None:
        time.sleep(seconds)
        return
    marker = storage.join(job_dir, *until.split("/"))
    deadline = time.monotonic() + seconds
    while not storage.exists(marker) and time.monotonic() < deadline:
        time.sleep(0.05)


def maybe_fail(
    job_dir: str,
    faults: list[dict],
    partition_id: int | None,
    op_index: int | None,
    point: str = "after_op",
    store: str | None = None,
    batch: int | None = None,
) -> None:
    for i, f in enumerate(faults):
        if not _matches(f, point, partition_id, op_index, store, batch):
            continue
        fired_dir = storage.join(job_dir, FIRED_DIR)
        prefix = f"fault{i}_"
        fired = [n for n in storage.listdir(fired_dir) if n.startswith(prefix)]
        if len(fired) >= int(f.get("times", 1)):
            continue
        storage.atomic_write_bytes(storage.join(fired_dir, f"{prefix}{len(fired)}"), b"fired")
        kind = f.get("kind", "raise")
        if kind in ("delay", "hang"):
            _hold(job_dir, float(f.get("seconds", 1.0 if kind == "delay" else 3600.0)), f.get("until"))
            continue
        if kind == "exit":
            os._exit(17)
        if kind == "kill_run":
            _kill_session()
        raise InjectedFault(
            f"injected fault at {point}: partition {partition_id} op {op_index} (firing {len(fired) + 1})"
        )
