"""Data-Juicer 1.6.1's default executor on the nightly bench's input, for bench/nightly_bench.py.

Data-Juicer has no incremental mode, so its "night 2" is a full run over night 2's input.  It gets the
same ops with the same arguments as our recipe, ``np`` set to the cores, no network (offline flags,
no cache files from an earlier run) and its own work dir under the bench's temp dir.  Its start-up is
measured on a 1-row input: 1.6.1 fails on an empty JSONL (``StopIteration``, docs/benchmarks.md).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from collections import Counter

import yaml

from bench._offline import OFFLINE_ENV

DJ_PROCESS = "/work/djvenv/bin/dj-process"


def offline_env(root: str) -> dict:
    """The environment of a dj-process run: offline, with an empty cache of its own under ``root``."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)  # its own venv only
    env.update(
        {
            "HF_HOME": os.path.join(root, "hf"),
            "HF_DATASETS_CACHE": os.path.join(root, "hf", "datasets"),
            "HUGGINGFACE_HUB_CACHE": os.path.join(root, "hf", "hub"),
            "DATA_JUICER_CACHE_HOME": os.path.join(root, "hf", "data_juicer"),
            "XDG_CACHE_HOME": os.path.join(root, "xdg"),
            **OFFLINE_ENV,
        }
    )
    return env


def concat_inputs(data_dir: str, out_path: str, max_rows: int | None = None) -> int:
    """Night 2's input files, in the name order our job reads them, as one JSONL file (not timed): row
    order is then the same for both executors."""
    n = 0
    with open(out_path, "w", encoding="utf-8") as out:
        for name in sorted(os.listdir(data_dir)):
            if not name.endswith(".jsonl"):
                continue
            with open(os.path.join(data_dir, name), encoding="utf-8") as fh:
                for line in fh:
                    if max_rows is not None and n >= max_rows:
                        return n
                    out.write(line)
                    n += 1
    return n


def run_dj(root: str, tag: str, dataset: str, ops: list[dict], np_: int, timeout_s: float = 3600) -> dict:
    """One dj-process run; returns wall seconds, exit status, export path and the log's path."""
    work = os.path.join(root, f"dj_work_{tag}")
    export = os.path.join(root, f"dj_{tag}.jsonl")
    cfg = os.path.join(root, f"dj_{tag}.yaml")
    shutil.rmtree(work, ignore_errors=True)
    with open(cfg, "w") as fh:
        yaml.safe_dump(
            {
                "project_name": f"nightly_bench_dj_{tag}",
                "dataset_path": dataset,
                "export_path": export,
                "work_dir": work,
                "text_keys": "text",
                "np": np_,
                "executor_type": "default",
                "use_cache": False,
                "open_tracer": False,
                "process": ops,
            },
            fh,
            sort_keys=False,
        )
    log_path = os.path.join(root, f"dj_{tag}.log")
    t0 = time.perf_counter()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [DJ_PROCESS, "--config", cfg],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=offline_env(root),
            cwd=root,
            start_new_session=True,  # its worker processes go with it on a timeout
        )
        try:
            rc: int | str = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            rc = "timeout"
    return {"wall_s": time.perf_counter() - t0, "rc": rc, "export": export, "log": log_path, "timeout_s": timeout_s}


def _rows(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def compare_rows(ours_path: str, dj_path: str) -> dict:
    """Row-by-row comparison of two JSONL exports as parsed JSON (the bytes differ by formatting:
    Data-Juicer writes through HF datasets' JSON writer).  Says whether the same rows are there in the
    same order, in another order, or which differ, and which fields only one side has."""
    if not os.path.exists(dj_path):
        return {"status": "MISSING", "detail": f"{dj_path} does not exist"}
    a, b = _rows(ours_path), _rows(dj_path)
    keys_a = set().union(*(r.keys() for r in a)) if a else set()
    keys_b = set().union(*(r.keys() for r in b)) if b else set()
    out = {
        "ours_rows": len(a),
        "dj_rows": len(b),
        "fields_only_ours": sorted(keys_a - keys_b),
        "fields_only_dj": sorted(keys_b - keys_a),
    }
    common = sorted(keys_a & keys_b)

    def canon(r: dict) -> str:
        return json.dumps({k: r.get(k) for k in common}, sort_keys=True, ensure_ascii=False)

    ca, cb = [canon(r) for r in a], [canon(r) for r in b]
    if ca == cb:
        out["status"] = "MATCH"
        out["detail"] = f"{len(a)} rows, the same rows in the same order (fields {common})"
        return out
    ma, mb = Counter(ca), Counter(cb)
    first = next((i for i, (x, y) in enumerate(zip(ca, cb)) if x != y), min(len(ca), len(cb)))
    out["status"] = "DIFFER"
    out["first_difference_row"] = first
    out["only_in_ours"] = sum((ma - mb).values())
    out["only_in_dj"] = sum((mb - ma).values())
    out["detail"] = (
        "the same rows in another order"
        if ma == mb
        else f"{out['only_in_ours']} rows only in ours, {out['only_in_dj']} only in DJ; first difference at row {first}"
    )
    return out
