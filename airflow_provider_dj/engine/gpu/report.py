"""``{job}/gpu_probe_results.json``: the preflight's findings, its cache, and the num_gpus rule.

The report is the source of truth the planner reads (``load_probe_report``);
the task's XCom is only a summary.  It is written atomically through
``core.fs`` so a crash never leaves half a report that a retry trusts.

Cache: each probed op carries a ``cache_key`` over everything that can
change its figures: the op's name, position and arguments, the ops replayed
before it (names and arguments), the device (kind, GPU model, capacity,
count), warmup/steady batch counts, the per-device worker cap, and the
sampling settings (dataset path, rows, offset, shuffle, seed).  A later
preflight of the same job (a retry, a cleared task, a resume) reuses an
entry only when its key is identical; a shuffled sample without a seed is
never reused (another draw is another sample).
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from typing import Any

from airflow_provider_dj.core import fs as storage
from airflow_provider_dj.engine.jobdir.layout import GPU_PROBE_REPORT

REPORT_NAME = GPU_PROBE_REPORT
REPORT_VERSION = 1
DEFAULT_GPU_WORKERS_PER_DEVICE = 5


def report_path(job_dir: str) -> str:
    return storage.join(job_dir, REPORT_NAME)


def load_probe_report(job_dir: str) -> dict | None:
    """The job's probe report, or None when there is none (no CUDA ops, preflight skipped, not run yet).

    A report that is not valid JSON raises ValueError naming the file: the planner must not
    silently plan without measurements it expected."""
    path = report_path(job_dir)
    if not storage.exists(path):
        return None
    try:
        data = json.loads(storage.read_bytes(path))
    except ValueError as exc:
        raise ValueError(f"{path} is not valid JSON ({exc}); delete it to re-probe") from None
    if not isinstance(data, dict) or data.get("version") != REPORT_VERSION:
        return None
    return data


def write_probe_report(job_dir: str, report: dict) -> str:
    path = report_path(job_dir)
    storage.makedirs(job_dir)
    storage.atomic_write_bytes(path, json.dumps(report, indent=2, sort_keys=False, default=str).encode())
    return path


def _canon(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


def cache_key_fields(
    *,
    op: dict,
    replayed: list[dict],
    device: dict,
    warmup: int,
    steady: int,
    max_gpu_workers_per_device: int,
    sampling: dict,
    skip_op_error: bool,
) -> dict:
    return {
        "op": {"index": op["index"], "name": op["name"], "args": op.get("args") or {}, "text_key": op.get("text_key")},
        "replayed": [{"index": r["index"], "name": r["name"], "args": r.get("args") or {}} for r in replayed],
        "device": {k: device.get(k) for k in ("kind", "gpu_model", "gpu_total_bytes", "gpu_count")},
        "warmup_batches": warmup,
        "steady_batches": steady,
        "max_gpu_workers_per_device": max_gpu_workers_per_device,
        "sampling": {k: sampling.get(k) for k in ("dataset_path", "rows", "offset", "shuffle", "seed")},
        "skip_op_error": skip_op_error,
    }


def cache_key(fields: dict) -> str:
    return hashlib.sha256(_canon(fields).encode()).hexdigest()[:32]


def reusable(fields: dict) -> bool:
    s = fields["sampling"]
    return not (s.get("shuffle") and s.get("seed") is None)


def find_cached(previous: dict | None, key: str) -> dict | None:
    """The previous entry with this exact key, if it was a successful measurement."""
    if not previous:
        return None
    for entry in previous.get("ops", []):
        if entry.get("cache_key") == key and entry.get("cache_reusable", True) and entry.get("rows_per_s") is not None:
            return entry
    return None


def _ceil4(x: float) -> float:
    return math.ceil(x * 10_000 - 1e-9) / 10_000


def schedule_num_gpus(
    memory_fraction: float | None, explicit: float | None, cap: int, device_kind: str
) -> tuple[float, str | None]:
    """Ray GPU share for one replica, and a warning when an explicit value had to be raised.

    * CPU path (no GPU in the cluster): 0 — asking Ray for a GPU share there would never schedule;
    * unset: ``max(memory_fraction, 1 / cap)``;
    * explicit below the measured share: raised to it, with a warning;
    * explicit otherwise: kept.
    """
    if device_kind != "cuda" or memory_fraction is None:
        return 0.0, None
    floor = 1.0 / max(1, cap)
    if explicit is None:
        return _ceil4(max(memory_fraction, floor)), None
    if explicit < memory_fraction:
        raised = _ceil4(memory_fraction)
        return raised, (
            f"num_gpus={explicit:g} is below the measured memory share {memory_fraction:.4f} "
            f"(peak + 10% headroom); raised to {raised:g} so replicas never over-commit device memory"
        )
    return float(explicit), None


def new_report(*, device: dict, settings: dict, sample: dict | None, executor: str) -> dict:
    return {
        "version": REPORT_VERSION,
        "created_at": time.time(),
        "device": device,
        "settings": settings,
        "executor": executor,
        "sample": sample,
        "ops": [],
        "not_probed": [],
        "units": [],
        "warnings": [],
        "timings": {},
    }
