"""The sharded global step's last stages against the partition count: linear, or growing with its square.

With lineage on (the default), each removed row's lineage names its representative's input row (and,
for MinHash, their shared band), which lie in the representative's partition's keys.  Duplicates of
uniformly chosen earlier rows point into every earlier partition, so a step that looks the
representatives up from each partition's mask task reads about P^2/2 keys files for P partitions.
This section measures the step's stages for growing P at a fixed partition size, in one process
(``run_tasks`` runs the tasks one by one here, so no task start-up hides the work), for the code under
test and for a baseline checkout of the project (``--baseline``, e.g. a ``git worktree`` of an earlier
commit), alternating which runs first, on the same job directories.  Both must commit identical keep
masks and lineage columns (their bytes' digest is compared).

    git worktree add /tmp/base <commit>
    .venv/bin/python -m bench masks-scaling --baseline /tmp/base --partitions 50,100,200,400

Job directories are built once per size with ``run_job`` (not measured) and deleted afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

from bench._proc import RESULTS_DIR
from bench.global_shards import build_job
from bench.report import md_table, write_json, write_text

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: Run in a fresh interpreter whose ``airflow_provider_dj`` is the version under measure: forget the
#: step's outputs, resolve it in shards in this process, print the stage times and the masks' digest.
CHILD = r"""
import glob, hashlib, json, os, sys, time
job_dir, shards = sys.argv[1], sys.argv[2]
os.environ["DJ_GLOBAL_STEP_SHARDS"] = shards
from bench.global_shards import clear_step  # the measured checkout's bench: the step's outputs forgotten
clear_step(job_dir)
import airflow_provider_dj
from airflow_provider_dj.engine.execution.global_ops import resolve_global_op
from airflow_provider_dj.engine.input.task_map import run_in_process
from airflow_provider_dj.engine.storage.context import JobContext
op_index = next(i for i, op in enumerate(JobContext(job_dir).plan.ops) if op.is_global)
t0 = time.time()
res = resolve_global_op(job_dir, op_index, run_tasks=run_in_process)
wall = time.time() - t0
durations = None
for path in glob.glob(os.path.join(job_dir, "events_*.jsonl")):
    for line in open(path):
        ev = json.loads(line)
        if ev.get("event_type") == "global_op_shards" and ev.get("timestamp", 0) >= t0:
            durations = ev["durations"]
from airflow_provider_dj.engine.storage.global_op_state import mask_store
ctx, digest, files = JobContext(job_dir), hashlib.sha256(), 0
op = ctx.plan.ops[op_index]
for part in ctx.partitioning_info["partitions"]:
    cp = mask_store(job_dir).load_valid(op_index, op.name, part["partition_id"], part["content_hash"], op.fingerprint)
    table, files = cp.table, files + 1
    for name in table.column_names:
        digest.update(name.encode() + repr(table.column(name).to_pylist()).encode())
print(json.dumps({"code": os.path.dirname(os.path.dirname(airflow_provider_dj.__file__)), "wall_s": wall,
                  "rows": res.rows, "kept": res.kept, "durations": durations, "digest": digest.hexdigest(), "mask_files": files}))
"""


def measure(code: str, job_dir: str, shards: int) -> dict:
    env = dict(os.environ, PYTHONPATH=code + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run(
        [sys.executable, "-c", CHILD, job_dir, str(shards)],
        env=env,
        cwd=job_dir,  # not the repository: "-c" puts the working directory first on sys.path
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"the step under {code} failed:\n{out.stderr[-3000:]}")
    res = json.loads(out.stdout.strip().splitlines()[-1])
    if not res["mask_files"]:
        raise RuntimeError(f"no keep mask found under {job_dir}: nothing to compare")
    if os.path.realpath(res["code"]) != os.path.realpath(code):
        raise RuntimeError(f"measured {res['code']}, not {code}: check PYTHONPATH")
    return res


def _after_components(d: dict) -> float:
    """Seconds of the step after its components: history and trace, partners, masks (the baseline has
    masks only, with its look-ups inside)."""
    return sum(d.get(k, 0.0) for k in ("history_and_trace", "partners", "masks"))


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", required=True, help="a checkout of the project to measure against")
    ap.add_argument("--partitions", default="50,100,200,400", help="partition counts, comma-separated")
    ap.add_argument("--rows-per-partition", type=int, default=5000)
    ap.add_argument("--workload", choices=("exact", "minhash"), default="exact")
    ap.add_argument("--shards", type=int, default=4, help="key shards (global_step_shards)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per version and size, alternating")
    ap.add_argument("--out", default=os.path.join(RESULTS_DIR, "masks_scaling"))
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    versions = {"baseline": os.path.abspath(args.baseline), "this": REPO}
    rows_out, results, same = [], [], True
    for parts in [int(x) for x in args.partitions.split(",") if x.strip()]:
        tmp = tempfile.mkdtemp(prefix="dj-masks-scaling-")
        try:
            job = build_job(tmp, args.workload, parts * args.rows_per_partition, parts)
            runs: dict[str, list[dict]] = {v: [] for v in versions}
            for i in range(args.repeat):
                order = list(versions) if i % 2 == 0 else list(reversed(versions))
                for v in order:
                    runs[v].append(measure(versions[v], job["job_dir"], args.shards))
            digests = {r["digest"] for v in versions for r in runs[v]}
            same = same and len(digests) == 1
            med = {v: statistics.median(_after_components(r["durations"]) for r in runs[v]) for v in versions}
            wall = {v: statistics.median(r["wall_s"] for r in runs[v]) for v in versions}
            results.append({"partitions": parts, "job": job, "runs": runs, "same_masks": len(digests) == 1})
            for v in versions:
                rows_out.append(
                    [
                        str(parts),
                        f"{runs[v][0]['rows']:,}",
                        v,
                        f"{wall[v]:.2f}",
                        f"{med[v]:.2f}",
                        f"{1000 * med[v] / parts:.1f}",
                        f"{med['baseline'] / med[v]:.2f}x",
                        "yes" if len(digests) == 1 else "NO",
                    ]
                )
            print(md_table(HEADER, rows_out[-2:]), flush=True)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    text = md_table(HEADER, rows_out)
    print(text)
    os.makedirs(args.out, exist_ok=True)
    write_text(os.path.join(args.out, "masks_scaling.md"), text + "\n")
    write_json(os.path.join(args.out, "masks_scaling.json"), {"args": vars(args), "results": results})
    return 0 if same else 1


HEADER = [
    "partitions",
    "rows",
    "code",
    "step wall s (median)",
    "after components s (median)",
    "ms per partition",
    "baseline / this",
    "same masks",
]


if __name__ == "__main__":
    sys.exit(main())
