"""Nightly reuse across jobs: night 2 (night 1's files + 5 % new rows in new files, some exact and some
near duplicates of night-1 rows) against a from-scratch run of night 2's input, in the same process.

Jobs run in-process through the engine (run_segment per partition, the global steps, the export): no
Airflow, no Ray, so the figures are the marginal compute and I/O, not start-up.  Prints each run's
wall time, the ratio night 2 / scratch, what night 2 reused, and whether the exports are byte-identical.

    PYTHONPATH=. .venv/bin/python bench/nightly_bench.py --rows 1000000 --files 10
"""

from __future__ import annotations

import argparse
import filecmp
import json
import os
import shutil
import tempfile
import time

from airflow_provider_dj.engine.config.recipe import load_recipe
from airflow_provider_dj.engine.execution.global_ops import resolve_global_op
from airflow_provider_dj.engine.execution.segment_runner import run_segment
from airflow_provider_dj.engine.jobdir.context import JobContext
from airflow_provider_dj.engine.jobdir.setup import prepare_job
from airflow_provider_dj.engine.output.export import export_job
from airflow_provider_dj.sample_corpus import write_corpus, write_growth_file

PROCESS = """process:
  - clean_email_mapper:
  - whitespace_normalization_mapper:
  - words_num_filter: {min_num: 5, max_num: 2000}
  - text_length_filter: {min_len: 50}
  - document_deduplicator: {lowercase: true}
  - words_num_filter: {min_num: 6}
"""


def run_job(tmp: str, data: str, name: str, work: str, reuse: bool, size: int) -> tuple[float, dict]:
    recipe = os.path.join(tmp, f"{name}.yaml")
    with open(recipe, "w") as fh:
        fh.write(
            f"dataset_path: {data}\nexport_path: {tmp}/{name}.jsonl\nwork_dir: {work}\n"
            f"partition: {{mode: manual, size: {size}, align: file}}\n"
            f"intermediate_storage: {{reuse_across_jobs: {str(reuse).lower()}}}\n{PROCESS}"
        )
    t0 = time.perf_counter()
    job = prepare_job(load_recipe(recipe), job_id=name)
    ctx = JobContext(job.job_dir)
    for seg in ctx.plan.segments:
        for p in range(len(ctx.partitioning_info["partitions"])):
            run_segment(job.job_dir, seg.index, p)
        if seg.keys_for_global is not None:
            resolve_global_op(job.job_dir, seg.keys_for_global)
    summary = export_job(job.job_dir)
    return time.perf_counter() - t0, summary


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000, help="night 1's rows")
    ap.add_argument("--files", type=int, default=10, help="night 1's input files")
    ap.add_argument("--size", type=int, default=50_000, help="partition.size (rows)")
    ap.add_argument("--growth", type=float, default=0.05, help="night 2's new rows, as a share of night 1's")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="dj_nightly_bench_")
    try:
        data = os.path.join(tmp, "in")
        per = args.rows // args.files
        for i in range(args.files):
            write_corpus(os.path.join(data, f"part_{i:04d}.jsonl"), per, seed=i)
        with open(os.path.join(data, "part_0000.jsonl")) as fh:
            texts = [json.loads(line)["text"] for _, line in zip(range(20_000), fh)]
        t1, s1 = run_job(tmp, data, "night1", os.path.join(tmp, "work"), True, args.size)
        new_rows = int(args.rows * args.growth)
        n_new = max(1, round(args.files * args.growth))
        for j in range(n_new):
            write_growth_file(
                os.path.join(data, f"part_{args.files + j:04d}.jsonl"), texts, new_rows // n_new, seed=1000 + j
            )
        t2, s2 = run_job(tmp, data, "night2", os.path.join(tmp, "work"), True, args.size)
        t3, s3 = run_job(tmp, data, "scratch", os.path.join(tmp, "scratch_work"), False, args.size)
        same = filecmp.cmp(os.path.join(tmp, "night2.jsonl"), os.path.join(tmp, "scratch.jsonl"), shallow=False)
        print(f"night 1: {s1['input']['total_rows']:,} rows in {s1['input']['partitions']} partitions: {t1:.2f} s")
        print(f"night 2 with reuse: {s2['input']['total_rows']:,} rows: {t2:.2f} s; reuse {s2['reuse']}")
        print(f"night 2 from scratch: {t3:.2f} s")
        print(f"ratio night 2 / scratch: {t2 / t3:.3f}; exports byte-identical: {same}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
