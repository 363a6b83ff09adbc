"""Tracer overhead: the same job with open_tracer off and on (trace_num 10), engine in-process.

No Airflow, no Ray: the engine's local executor (engine.run_job, partitions
in this process), timed end to end, best of ``--repeat`` runs each.
Prints both times and the ratio.  Usage::

    .venv/bin/python -m bench tracer --rows 200000 --partitions 4 --repeat 3
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

from airflow_provider_dj.testing.sample_corpus import write_corpus
from bench._inprocess_job import run_job, write_recipe


def one_run(tmp: str, data: str, parts: int, tracer: bool, tag: str) -> float:
    recipe = write_recipe(tmp, data, tag, parts, extra="open_tracer: true\ntrace_num: 10\n" if tracer else "")
    t0 = time.perf_counter()
    job_dir = run_job(recipe, tag, parts)
    dt = time.perf_counter() - t0
    shutil.rmtree(job_dir)
    return dt


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    tmp = tempfile.mkdtemp(prefix="dj-tracer-bench-")
    data = write_corpus(os.path.join(tmp, "in.jsonl"), args.rows, seed=42)
    times: dict[str, list[float]] = {"off": [], "on": []}
    for r in range(args.repeat):  # interleaved, so drifting machine load hits both alike
        for mode in ("off", "on"):
            times[mode].append(one_run(tmp, data, args.partitions, mode == "on", f"{mode}{r}"))
    off, on = min(times["off"]), min(times["on"])
    print(f"rows={args.rows} partitions={args.partitions} repeat={args.repeat} (best of)")
    print(f"tracing off: {off:.3f} s   all: {', '.join(f'{t:.3f}' for t in times['off'])}")
    print(f"tracing on : {on:.3f} s   all: {', '.join(f'{t:.3f}' for t in times['on'])}")
    print(f"ratio on/off: {on / off:.3f}  (+{(on - off) * 1000:.0f} ms)")
    shutil.rmtree(tmp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
