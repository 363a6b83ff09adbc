"""Planning time against cores: ``plan_partitions`` (index + hash) over one JSONL corpus, by 1 and N tasks.

Planning reads every input byte twice: the index (where each row starts, UTF-8 and JSON-object checks)
and the partitions' content hashes.  Both are tasks (``engine/input/indexing.py``: a chunk of
``[dj] planning_chunk_mb`` each; a partition each for the hashes) over a ``RunTasks``
(``engine/input/task_map.py``).  This section plans the same corpus with:

* ``1 task at a time``: ``run_in_process``, the baseline (the one-pass planner's speed);
* ``threads xN``: ``run_on_threads`` with N workers (what ``dj-airflow run`` and the validate task use);
* ``Ray xN``: Ray tasks on a local Ray of N CPUs (what a validate task connected to Ray uses), Ray's
  start not counted.

Each configuration runs ``--repeats`` times after one warm-up read (the page cache holds the corpus, so
this is CPU time, not disk time); the best time is reported with MB/s and the ratio to the baseline.
Every configuration's partitioning_info (less timing and seal) must equal the baseline's, else the section
prints MISMATCH and exits 1.  Usage::

    .venv/bin/python -m bench planning [--rows 3000000] [--cores 1,2] [--partitions 32] [--repeats 3]
        [--no-ray] [--out DIR]
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import time

from bench._proc import RESULTS_DIR
from bench.report import md_table, write_json, write_text

MB = 1e6


def corpus(path: str, rows: int) -> None:
    """Rows of about 200 bytes of varied text (generated, not measured)."""
    import numpy as np

    if os.path.exists(path) and os.path.getsize(path) > 0:
        return
    rng = np.random.default_rng(7)
    words = [w.encode() for w in "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()]
    tmp = path + ".tmp"
    with open(tmp, "wb") as fh:
        for start in range(0, rows, 100_000):
            n = min(100_000, rows - start)
            picks = rng.integers(0, len(words), size=(n, 28))
            lines = [
                b'{"id": %d, "text": "%s"}\n' % (start + i, b" ".join(words[j] for j in picks[i])) for i in range(n)
            ]
            fh.write(b"".join(lines))
    os.replace(tmp, path)


def _plan(path: str, partitions: int, run_tasks) -> tuple[float, dict]:
    from airflow_provider_dj.engine.config.recipe import PartitionConfig
    from airflow_provider_dj.engine.input.partitioning import plan_partitions

    t0 = time.perf_counter()
    info = plan_partitions(path, PartitionConfig(mode="manual", num_of_partitions=partitions), None, run_tasks)
    wall = time.perf_counter() - t0
    for k in ("timing", "checksum_xxh3_128"):
        info.pop(k, None)
    return wall, info


def _configs(cores: list[int], ray: bool) -> list[tuple[str, object, int | None]]:
    from airflow_provider_dj.engine.input.task_map import ray_task_runner, run_in_process, run_on_threads

    out: list[tuple[str, object, int | None]] = [("1 task at a time", run_in_process, None)]
    out += [(f"threads x{n}", functools.partial(run_on_threads, workers=n), None) for n in cores]
    if ray:
        out += [(f"Ray x{n}", ray_task_runner, n) for n in cores]
    return out


def measure(path: str, partitions: int, cores: list[int], repeats: int, ray: bool) -> list[dict]:
    size = os.path.getsize(path)
    results, baseline_info, baseline_s = [], None, None
    for label, run, ray_cpus in _configs(cores, ray):
        if ray_cpus is not None:
            import ray as ray_mod

            if ray_mod.is_initialized():
                ray_mod.shutdown()
            ray_mod.init(address="local", num_cpus=ray_cpus, include_dashboard=False, log_to_driver=False)
        _plan(path, partitions, run)  # warm: page cache, imports, Ray workers
        best, info = min((_plan(path, partitions, run) for _ in range(repeats)), key=lambda r: r[0])
        baseline_info = baseline_info or info
        baseline_s = baseline_s or best
        same = info == baseline_info
        results.append(
            {
                "config": label,
                "seconds": round(best, 3),
                "mb_per_s": round(2 * size / MB / best, 1),  # every byte is read twice: index and hash
                "vs_baseline": round(baseline_s / best, 2),
                "same_plan": same,
            }
        )
        print(f"  {label:18s} {best:7.2f} s  {2 * size / MB / best:7.1f} MB/s  x{baseline_s / best:.2f}  same={same}")
    return results


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=3_000_000)
    p.add_argument("--cores", default="1,2", help="worker counts, comma-separated")
    p.add_argument("--partitions", type=int, default=32)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--no-ray", action="store_true", help="threads only")
    p.add_argument("--out", default=os.path.join(RESULTS_DIR, "planning"))
    a = p.parse_args(argv)
    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, f"corpus_{a.rows}.jsonl")
    corpus(path, a.rows)
    size = os.path.getsize(path)
    print(f"== planning {a.rows:,} rows ({size / MB:.0f} MB) in {a.partitions} partitions; {os.cpu_count()} cores here")
    cores = [int(c) for c in a.cores.split(",") if c]
    results = measure(path, a.partitions, cores, a.repeats, not a.no_ray)
    rows = [
        [r["config"], f"{r['seconds']:.2f}", f"{r['mb_per_s']:.0f}", f"{r['vs_baseline']:.2f}x", str(r["same_plan"])]
        for r in results
    ]
    table = md_table(["configuration", "seconds (best)", "MB/s (2 reads)", "vs 1 task at a time", "same plan"], rows)
    print(table)
    write_json(os.path.join(a.out, "planning.json"), {"rows": a.rows, "bytes": size, "results": results})
    write_text(os.path.join(a.out, "planning.md"), table)
    if not all(r["same_plan"] for r in results):
        print("MISMATCH: a configuration planned differently", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
