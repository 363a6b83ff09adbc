"""Resume benchmark: how long strict validation takes, and what resuming a finished job costs.

Prints, for a generated corpus (default 1M rows):
  * the resume validation step (6 steps; step 5 re-hashes every partition's
    full content) — wall time and hash-verification throughput in MB/s;
  * a full `dj-airflow run` against `dj-airflow run --resume` of the same,
    completed job (which does no op work and re-verifies the export),
    and the resume's share of the full run.

Usage: .venv/bin/python -m bench resume [--rows 1000000] [--partitions 16]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RECIPE = """\
project_name: resume_bench
dataset_path: {data}
export_path: {out}
work_dir: {work}
partition: {{mode: manual, num_of_partitions: {parts}}}
checkpoint: {{strategy: every_op}}
process:
  - clean_email_mapper:
  - whitespace_normalization_mapper:
  - words_num_filter: {{min_num: 5}}
  - text_length_filter: {{min_len: 20}}
  - document_deduplicator: {{lowercase: true}}
"""


def _run(cmd: list[str], env: dict) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        sys.exit(f"command failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--partitions", type=int, default=16)
    args = ap.parse_args(argv)
    from airflow_provider_dj.engine.config.recipe import load_recipe
    from airflow_provider_dj.engine.job.resume import validate_resume
    from airflow_provider_dj.engine.job.setup import prepare_job
    from airflow_provider_dj.engine.planning.plan import build_plan
    from airflow_provider_dj.testing.sample_corpus import write_corpus

    data = os.path.join(HERE, "results", "data", f"corpus_{args.rows}_s42.jsonl")
    if not os.path.exists(data):
        print(f"generating {args.rows:,} rows -> {data}", flush=True)
        write_corpus(data, args.rows, seed=42)
    mb = os.path.getsize(data) / 1e6
    scratch = tempfile.mkdtemp(prefix="dj-resume-bench-")
    recipe_path = os.path.join(scratch, "recipe.yaml")
    with open(recipe_path, "w") as fh:
        fh.write(
            RECIPE.format(
                data=data,
                out=os.path.join(scratch, "out.jsonl"),
                work=os.path.join(scratch, "work"),
                parts=args.partitions,
            )
        )

    # 1. validation step alone, on a planned job
    recipe = load_recipe(recipe_path)
    t0 = time.perf_counter()
    prepare_job(recipe, job_id="plan_only")
    plan_s = time.perf_counter() - t0
    job_dir = os.path.join(scratch, "work", "plan_only")
    t0 = time.perf_counter()
    report = validate_resume(
        load_recipe(recipe_path, {"resume": "plan_only"}), job_dir, build_plan(recipe), log_step=lambda _m: None
    )
    val_s = time.perf_counter() - t0

    # 2. full run vs resume of the completed job, through the CLI (Airflow + Ray)
    env = dict(os.environ, DJ_AIRFLOW_HOME=os.path.join(HERE, "results", "airflow_home"))
    cli = os.path.join(os.path.dirname(sys.executable), "dj-airflow")
    _run(
        [
            cli,
            "run",
            recipe_path,
            "--job-id",
            "warmup",
            "--set",
            "partition.num_of_partitions=1",
            "--set",
            f"dataset_path={os.path.join(ROOT, 'dags', 'recipes', 'data', 'demo_corpus.jsonl')}",
        ],
        env,
    )
    full_s = _run([cli, "run", recipe_path, "--job-id", "full"], env)
    resume_s = _run([cli, "run", recipe_path, "--resume", "full"], env)

    print(f"\nmachine: {os.cpu_count()} cores; input {args.rows:,} rows, {mb:.0f} MB, {args.partitions} partitions")
    print(f"{'planning (index + hash)':<44}{plan_s:>9.2f} s   {mb / plan_s:>8.0f} MB/s")
    print(f"{'resume validation (6 steps)':<44}{val_s:>9.2f} s   {mb / val_s:>8.0f} MB/s")
    print(
        f"{'  of which step 5, hash verification':<44}{report.hash_seconds:>9.2f} s   "
        f"{report.hashed_bytes / 1e6 / max(report.hash_seconds, 1e-9):>8.0f} MB/s"
    )
    print(f"{'full dj-airflow run':<44}{full_s:>9.2f} s")
    print(
        f"{'dj-airflow run --resume (job complete)':<44}{resume_s:>9.2f} s   {resume_s / full_s:>8.1%} of the full run"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
