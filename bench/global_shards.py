"""A global op's step in one process against the same step in shards: time, orchestrator and task memory.

A deduplicator's global step decides over every row which to keep.  The single-process step
(``engine/execution/global_ops.py``) holds every row's key at once; the sharded step
(``engine/execution/global_shards.py``) runs scatter, key-shard, components and mask tasks, each
committing its own output.  For each workload and size this section builds one job directory with
``engine.run_job`` (one deduplicator, ``workers=1``, manual partitions; not measured), then resolves
the step from the committed keys once per configuration, each in a fresh spawned process (so its
``ru_maxrss`` is its own), deleting the masks and ``global_shards/`` between runs:

* ``single``: ``global_step_shards: 0`` with the default budget (the single-process step);
* ``auto``: ``global_step_shards: 0`` with ``global_shard_memory_mb`` lowered (``--budget-mb`` for exact
  keys, ``--minhash-budget-mb`` for MinHash) so the planner shards at these sizes; the K it chose is read
  back from the step's ``global_op_shards`` event;
* ``K=7``, ``K=64``: ``global_step_shards`` forced.

Sharded tasks run through a ``run_tasks`` backed by a spawn ``ProcessPoolExecutor`` (2 workers, one task
per process), each task reporting its own peak RSS.  Every configuration's keep masks must equal the
single step's, else the section prints MISMATCH and exits 1.  Workloads: exact dedup
(``document_deduplicator``) over short rows with about 20% exact copies of earlier rows, and MinHash
(``document_minhash_deduplicator``, 256 permutations, Jaccard 0.7) over 40-word texts with about 20%
near copies (one word changed) of earlier rows.  Usage::

    .venv/bin/python -m bench global-shards [--rows 1000000,3000000,10000000]
        [--minhash-rows 100000,300000] [--shards auto,7,64] [--quick] [--out DIR]
"""

from __future__ import annotations

import argparse
import glob
import json
import multiprocessing
import os
import resource
import shutil
import sys
import time
import traceback

from bench._proc import RESULTS_DIR
from bench.report import md_table, write_json, write_text

KIB = 1024  # ru_maxrss is in KiB on Linux
CONFIG_SINGLE = "single"


# --- corpora and job directories (set-up, not measured) -------------------------------------------
def exact_corpus(path: str, rows: int, seed: int = 1) -> None:
    """Short rows; about 20% are exact copies of a uniformly chosen earlier row (duplicates span
    partitions)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    idx = np.arange(rows)
    dup = rng.random(rows) < 0.2
    src = (rng.random(rows) * idx).astype(np.int64)
    ids = np.where(dup, src, idx)
    with open(path, "w") as fh:
        step = 1_000_000
        for s in range(0, rows, step):
            fh.write("".join(f'{{"text":"row {i} of the short corpus"}}\n' for i in ids[s : s + step].tolist()))


def minhash_corpus(path: str, rows: int, seed: int = 1) -> None:
    """40-word texts over a 20,000-word vocabulary; about 20% copy an earlier row with one word changed
    (a near copy of a near copy chains rows into clusters)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    vocab = np.array([f"w{i}" for i in range(20_000)])
    words = rng.integers(0, len(vocab), size=(rows, 40))
    dup = rng.random(rows) < 0.2
    dup[0] = False
    src = (rng.random(rows) * np.arange(rows)).astype(np.int64)
    changed = rng.integers(0, 40, size=rows)
    fresh = rng.integers(0, len(vocab), size=rows)
    for i in np.flatnonzero(dup).tolist():
        words[i] = words[src[i]]
        words[i, changed[i]] = fresh[i]
    with open(path, "w") as fh:
        for row in vocab[words].tolist():
            fh.write('{"text":"' + " ".join(row) + '"}\n')


WORKLOADS = {
    "exact": ("document_deduplicator", "{}", exact_corpus),
    "minhash": (
        "document_minhash_deduplicator",
        "{num_permutations: 256, jaccard_threshold: 0.7}",
        minhash_corpus,
    ),
}

RECIPE = """\
project_name: global_shards_bench
dataset_path: {data}
export_path: {out}/export.jsonl
work_dir: {out}/work
partition:
  mode: manual
  num_of_partitions: {partitions}
process:
  - {op}: {args}
"""


def build_job(out: str, workload: str, rows: int, partitions: int) -> dict:
    """Corpus + one ``run_job`` of the one-deduplicator recipe; the job directory and its counts."""
    import logging

    logging.basicConfig(level=logging.WARNING)
    from airflow_provider_dj.engine import run_job

    op, args, make = WORKLOADS[workload]
    os.makedirs(out, exist_ok=True)
    data = os.path.join(out, "in.jsonl")
    t0 = time.perf_counter()
    make(data, rows)
    t1 = time.perf_counter()
    recipe = os.path.join(out, "recipe.yaml")
    with open(recipe, "w") as fh:
        fh.write(RECIPE.format(data=data, out=out, partitions=partitions, op=op, args=args))
    result = run_job(recipe, job_id="job", workers=1, say=lambda _line: None)
    os.remove(data)  # only the job directory's keys are read from here on
    return {
        "job_dir": result.job_dir,
        "exported": result.rows,
        "corpus_s": t1 - t0,
        "run_job_s": time.perf_counter() - t1,
    }


# --- the measured step ------------------------------------------------------------------------------
def _maxrss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * KIB


def measured_task(fn, args: tuple):
    """Run one sharded-step task; its result, and this process's peak RSS before and after it (bytes).
    The process runs this one task (``max_tasks_per_child=1``), so the peak is the task's."""
    start = _maxrss()
    result = fn(*args)
    return result, start, _maxrss()


class PoolRunner:
    """``run_tasks`` for ``resolve_sharded``: every task in its own spawned process, two at a time,
    results in order; records each task's stage (function name) and peak RSS."""

    def __init__(self, workers: int = 2):
        from concurrent.futures import ProcessPoolExecutor

        self.pool = ProcessPoolExecutor(
            max_workers=workers, max_tasks_per_child=1, mp_context=multiprocessing.get_context("spawn")
        )
        self.tasks: list[dict] = []

    def __call__(self, fn, args_list: list[tuple]) -> list:
        futures = [self.pool.submit(measured_task, fn, tuple(a)) for a in args_list]
        out = []
        for f in futures:
            result, start, peak = f.result()
            self.tasks.append({"stage": fn.__name__, "start_rss": start, "peak_rss": peak})
            out.append(result)
        return out

    def close(self) -> None:
        self.pool.shutdown(wait=True)


def clear_step(job_dir: str) -> None:
    """Forget the step's outputs so the next run resolves from the keys: the keep masks and the stages."""
    for d in glob.glob(os.path.join(job_dir, "checkpoints", "dedup_mask_op_*")):
        shutil.rmtree(d)
    shutil.rmtree(os.path.join(job_dir, "global_shards"), ignore_errors=True)


def _events_since(job_dir: str, t0: float, kind: str) -> list[dict]:
    found = []
    for path in glob.glob(os.path.join(job_dir, "events_*.jsonl")):
        with open(path) as fh:
            for line in fh:
                if f'"{kind}"' in line:
                    ev = json.loads(line)
                    if ev.get("event_type") == kind and ev.get("timestamp", 0) >= t0:
                        found.append(ev)
    return sorted(found, key=lambda e: e["timestamp"])


def _keep_flags(job_dir: str):
    """Every partition's committed keep flags, in partition order, as one bool array."""
    import numpy as np

    from airflow_provider_dj.engine.storage.context import JobContext
    from airflow_provider_dj.engine.storage.global_op_state import MASK_COLUMN, mask_store

    ctx = JobContext(job_dir)
    op_index = next(i for i, op in enumerate(ctx.plan.ops) if op.is_global)
    op = ctx.plan.ops[op_index]
    ms = mask_store(job_dir)
    flags = []
    for p in ctx.partitioning_info["partitions"]:
        cp = ms.load_valid(op_index, op.name, p["partition_id"], p["content_hash"], op.fingerprint)
        if cp is None:
            raise RuntimeError(f"partition {p['partition_id']}: no committed keep mask")
        flags.append(cp.table.column(MASK_COLUMN).to_numpy(zero_copy_only=False))
    return np.concatenate(flags).astype(bool)


def measure_step(job_dir: str, config: str, budget_mb: int, mask_path: str) -> dict:
    """One configuration of the step, in this (fresh) process: its wall time, this process's peak RSS,
    every task's peak RSS, the stage durations; the keep flags are saved to ``mask_path``."""
    import logging

    import numpy as np

    logging.basicConfig(level=logging.WARNING)
    if config == CONFIG_SINGLE:
        os.environ["DJ_GLOBAL_STEP_SHARDS"] = "0"
        os.environ.pop("DJ_GLOBAL_SHARD_MEMORY_MB", None)
    elif config == "auto":
        os.environ["DJ_GLOBAL_STEP_SHARDS"] = "0"
        os.environ["DJ_GLOBAL_SHARD_MEMORY_MB"] = str(budget_mb)
    else:
        os.environ["DJ_GLOBAL_STEP_SHARDS"] = str(int(config))
        os.environ["DJ_GLOBAL_SHARD_MEMORY_MB"] = str(budget_mb)
    from airflow_provider_dj.engine.execution.global_ops import resolve_global_op
    from airflow_provider_dj.engine.storage.context import JobContext

    op_index = next(i for i, op in enumerate(JobContext(job_dir).plan.ops) if op.is_global)
    clear_step(job_dir)
    runner = PoolRunner()
    try:
        before = _maxrss()
        t_wall = time.time()
        t0 = time.perf_counter()
        result = resolve_global_op(job_dir, op_index, run_tasks=runner)
        wall = time.perf_counter() - t0
        peak = _maxrss()
    finally:
        runner.close()
    shards = _events_since(job_dir, t_wall, "global_op_shards")
    np.save(mask_path, _keep_flags(job_dir))
    tasks = runner.tasks
    biggest = max(tasks, key=lambda t: t["peak_rss"]) if tasks else None
    by_stage: dict[str, dict] = {}
    for t in tasks:
        s = by_stage.setdefault(t["stage"], {"tasks": 0, "peak_rss": 0, "start_rss": 0})
        s["tasks"] += 1
        s["peak_rss"] = max(s["peak_rss"], t["peak_rss"])
        s["start_rss"] = max(s["start_rss"], t["start_rss"])
    return {
        "config": config,
        "budget_mb": None if config == CONFIG_SINGLE else budget_mb,
        "rows": result.rows,
        "kept": result.kept,
        "wall_s": wall,
        "orchestrator_start_rss": before,
        "orchestrator_peak_rss": peak,
        "key_shards": shards[-1]["key_shards"] if shards else 0,
        "node_shards": shards[-1]["node_shards"] if shards else 0,
        "edges": shards[-1]["edges"] if shards else None,
        "durations": shards[-1]["durations"] if shards else None,
        "tasks": len(tasks),
        "task_peak_rss": biggest["peak_rss"] if biggest else None,
        "task_peak_stage": biggest["stage"] if biggest else None,
        "task_start_rss": max(t["start_rss"] for t in tasks) if tasks else None,
        "stages": by_stage,
    }


def _child(result_path: str, fn_name: str, args: tuple) -> None:
    try:
        out = {"ok": True, "value": globals()[fn_name](*args)}
    except BaseException:  # noqa: BLE001 - reported by the parent
        out = {"ok": False, "error": traceback.format_exc()}
    with open(result_path, "w") as fh:
        json.dump(out, fh)


def in_child(scratch: str, fn_name: str, *args):
    """``fn_name(*args)`` of this module in a fresh spawned process (its own ``ru_maxrss``); its value."""
    path = os.path.join(scratch, f"_child_{os.getpid()}_{time.time_ns()}.json")
    proc = multiprocessing.get_context("spawn").Process(target=_child, args=(path, fn_name, args))
    proc.start()
    proc.join()
    if not os.path.exists(path):
        raise RuntimeError(f"{fn_name}{args}: child exited {proc.exitcode} without a result")
    with open(path) as fh:
        out = json.load(fh)
    os.remove(path)
    if not out["ok"]:
        raise RuntimeError(f"{fn_name} failed in its process:\n{out['error']}")
    return out["value"]


# --- the report ---------------------------------------------------------------------------------
def _mib(n) -> str:
    return "-" if n is None else f"{n / 2**20:,.0f}"


def table_rows(results: list[dict]) -> list[list[str]]:
    rows = []
    for r in results:
        base = next(
            x
            for x in results
            if x["workload"] == r["workload"] and x["size"] == r["size"] and x["config"] == CONFIG_SINGLE
        )
        k = r["key_shards"]
        if r["config"] == CONFIG_SINGLE:
            label = CONFIG_SINGLE
        elif r["config"] == "auto":
            label = f"auto (K={k})" if k else "auto (single)"
        else:
            label = f"K={k}"
        d = r.get("durations") or {}
        stages = " / ".join(f"{d[s]:.1f}" for s in ("scatter", "resolve", "components", "masks")) if d else "-"
        rows.append(
            [
                r["workload"],
                f"{r['size']:,}",
                label,
                "-" if r["budget_mb"] is None else str(r["budget_mb"]),
                f"{r['wall_s']:.2f}",
                f"{r['size'] / r['wall_s']:,.0f}",
                f"{r['wall_s'] / base['wall_s']:.2f}",
                _mib(r["orchestrator_peak_rss"]),
                _mib(r["task_peak_rss"]) + (f" ({r['task_peak_stage']})" if r["task_peak_stage"] else ""),
                _mib(r["task_start_rss"]),
                str(r["tasks"]),
                stages,
                "yes" if r["masks_equal"] else "NO",
            ]
        )
    return rows


HEADER = [
    "workload",
    "rows",
    "step",
    "budget MiB",
    "wall s",
    "rows/s",
    "time vs single",
    "orchestrator peak MiB",
    "largest task peak MiB (stage)",
    "task RSS at start MiB",
    "tasks",
    "scatter / resolve / components / masks s",
    "masks equal",
]


def print_table(results: list[dict]) -> None:
    rows = table_rows(results)
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:  # pragma: no cover - rich is a dev dependency
        print(md_table(HEADER, rows))
        return
    t = Table(title="global step: single process against shards")
    for h in HEADER:
        t.add_column(h, justify="left" if h in ("workload", "step") else "right")
    for r in rows:
        t.add_row(*r, style="bold red" if r[-1] == "NO" else None)
    Console(width=240).print(t)


def _sizes(text: str) -> list[int]:
    return [int(float(x)) for x in text.split(",") if x.strip()]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--rows", default="1000000,3000000,10000000", help="exact-dedup sizes, comma-separated ('' for none)"
    )
    p.add_argument("--minhash-rows", default="100000,300000", help="MinHash sizes, comma-separated ('' for none)")
    p.add_argument("--shards", default="auto,7,64", help="sharded configurations: auto and/or forced K")
    p.add_argument("--partitions", type=int, default=16)
    p.add_argument(
        "--budget-mb", type=int, default=320, help="global_shard_memory_mb of the sharded exact runs (64 MiB of data)"
    )
    p.add_argument(
        "--minhash-budget-mb",
        type=int,
        default=288,
        help="global_shard_memory_mb of the sharded MinHash runs, the least allowed: 32 MiB of data (auto shards "
        "only past rows*78 bytes)",
    )
    p.add_argument("--quick", action="store_true", help="smoke size: 200k exact, 5k MinHash rows, 4 partitions, K=7")
    p.add_argument("--keep", action="store_true", help="keep the job directories")
    p.add_argument("--out", default=os.path.join(RESULTS_DIR, "global_shards"))
    args = p.parse_args(argv)
    if args.quick:
        args.rows, args.minhash_rows, args.shards, args.partitions = "200000", "5000", "7", 4
    configs = [CONFIG_SINGLE] + [c.strip() for c in args.shards.split(",") if c.strip()]
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    plan = [("exact", n) for n in _sizes(args.rows)] + [("minhash", n) for n in _sizes(args.minhash_rows)]
    results, jobs, failed = [], [], False
    import numpy as np

    for workload, size in plan:
        job_root = os.path.join(out, f"{workload}_{size}")
        shutil.rmtree(job_root, ignore_errors=True)
        job = in_child(out, "build_job", job_root, workload, size, args.partitions)
        job.update(workload=workload, size=size)
        jobs.append(job)
        print(
            f"{workload} {size:,} rows: job built in {job['corpus_s'] + job['run_job_s']:.1f}s "
            f"({job['exported']:,} rows exported)",
            file=sys.stderr,
        )
        budget = args.budget_mb if workload == "exact" else args.minhash_budget_mb
        ref = None
        for config in configs:
            mask_path = os.path.join(job_root, f"keep_{config}.npy")
            r = in_child(out, "measure_step", job["job_dir"], config, budget, mask_path)
            keep = np.load(mask_path)
            if ref is None:
                ref = keep
            r["masks_equal"] = bool(len(keep) == len(ref) and np.array_equal(keep, ref))
            r.update(workload=workload, size=size)
            results.append(r)
            print(
                f"  {config:>6}: K={r['key_shards']} {r['wall_s']:.2f}s, orchestrator "
                f"{_mib(r['orchestrator_peak_rss'])} MiB, largest task {_mib(r['task_peak_rss'])} MiB, "
                f"kept {r['kept']:,}" + ("" if r["masks_equal"] else "  MISMATCH"),
                file=sys.stderr,
            )
            write_json(os.path.join(out, "global_shards.json"), {"jobs": jobs, "results": results})
            if not r["masks_equal"]:
                failed = True
                print(
                    f"MISMATCH: {workload} {size:,} rows, {config}: {int((keep != ref).sum()) if len(keep) == len(ref) else 'a different number of'} "
                    "keep flags differ from the single-process step's",
                    file=sys.stderr,
                )
        if not args.keep:
            shutil.rmtree(job_root, ignore_errors=True)
    print_table(results)
    write_json(os.path.join(out, "global_shards.json"), {"jobs": jobs, "results": results})
    write_text(os.path.join(out, "global_shards.md"), md_table(HEADER, table_rows(results)) + "\n")
    if failed:
        print("MISMATCH: a sharded step committed different keep masks than the single-process step", file=sys.stderr)
        return 1
    return 0
