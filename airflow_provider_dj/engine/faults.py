"""Deterministic fault injection, for tests and fire drills.

A job directory may hold ``_fault_injection.json``: a list of
``{"partition_id": P, "after_op": I, "times": N, "kind": "raise"|"exit"}``.
When partition P finishes op I (and its checkpoint, if any, is committed),
the runner fails — raising, or killing its own process with ``exit`` to
simulate a crashed worker — at most N times in total.  Firings are counted
with marker files in the job directory, so the count survives retries,
process restarts and other nodes.  Without the file this costs one stat per
partition run.
"""

from __future__ import annotations

import json
import os

from airflow_provider_dj.engine import storage

FAULT_FILE = "_fault_injection.json"
FIRED_DIR = "_fault_injection.fired"


class InjectedFault(RuntimeError):
    """Raised by an injected fault; never raised in a job without a fault file."""


def load_faults(job_dir: str) -> list[dict]:
    path = storage.join(job_dir, FAULT_FILE)
    try:
        return json.loads(storage.read_bytes(path))
    except FileNotFoundError:
        return []


def maybe_fail(job_dir: str, faults: list[dict], partition_id: int, op_index: int) -> None:
    for i, f in enumerate(faults):
        if f.get("partition_id") != partition_id or f.get("after_op") != op_index:
            continue
        fired_dir = storage.join(job_dir, FIRED_DIR)
        prefix = f"fault{i}_"
        fired = [n for n in storage.listdir(fired_dir) if n.startswith(prefix)]
        if len(fired) >= int(f.get("times", 1)):
            continue
        storage.atomic_write_bytes(storage.join(fired_dir, f"{prefix}{len(fired)}"), b"fired")
        msg = f"injected fault: partition {partition_id} after op {op_index} (firing {len(fired) + 1})"
        if f.get("kind") == "exit":
            os._exit(17)
        raise InjectedFault(msg)
