"""Corpus size against memory and time: the spine recipe at 1M, 3M and 10M rows through ``dj-airflow run``.

Each size runs twice on the same synthetic corpus (bench/run_bench.py's generator, cached under
``--data-dir``): automatic partitioning (``partition.mode: auto``: partitions of at most 50,000 rows
of text) and manual partitioning into 4 (2.5M rows a partition at 10M).  Both exports of a size must
be byte-identical.  For each run it records wall time and the peak PSS of the whole process tree
(the CLI, its Ray and Ray's workers), and it prints two ratios against the smallest size:

* memory: peak PSS at the largest size over peak PSS at the smallest (flat: about 1);
* time: wall time at the largest size over the smallest size's wall time scaled linearly by rows
  (linear: 1; above 1, the job gets slower per row as it grows).

Usage::

    .venv/bin/python -m bench scale [--sizes 1000000 3000000 10000000] [--out DIR]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import sys

from bench._measure import run_measured
from bench._proc import RESULTS_DIR
from bench._recipes import spine_process_yaml
from bench.report import md_table, write_chart, write_json
from bench.run_bench import ensure_corpus

VENV_BIN = os.path.dirname(sys.executable)
RECIPE = """\
project_name: scale_bench
dataset_path: {data}
export_path: {out}/export_{label}.jsonl
work_dir: {out}/jobs
text_keys: text
partition:
{partition}
""" + spine_process_yaml(100000)
MODES = {
    "auto": "  mode: auto",
    "manual4": "  mode: manual\n  num_of_partitions: 4",
}


def _digest(path: str) -> str | None:
    if not os.path.exists(path):
        return None
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def run_one(out: str, data: str, rows: int, mode: str, timeout_s: float) -> dict:
    label = f"{rows}_{mode}"
    recipe = os.path.join(out, f"recipe_{label}.yaml")
    with open(recipe, "w") as fh:
        fh.write(RECIPE.format(data=data, out=out, label=label, partition=MODES[mode]))
    shutil.rmtree(os.path.join(out, "jobs", label), ignore_errors=True)
    cmd = [os.path.join(VENV_BIN, "dj-airflow"), "run", recipe, "--job-id", label]
    res = run_measured(cmd, env=dict(os.environ), log_path=os.path.join(out, f"{label}.log"), timeout_s=timeout_s)
    export = os.path.join(out, f"export_{label}.jsonl")
    exported = None
    if res.rc == 0 and os.path.exists(export):
        with open(export, "rb") as fh:
            exported = sum(1 for _ in fh)
    digest = _digest(export) if res.rc == 0 else None
    if os.path.exists(export):
        os.remove(export)  # tens of GB over a run: keep the digest, not the file
    shutil.rmtree(os.path.join(out, "jobs", label), ignore_errors=True)
    return {
        "rows": rows,
        "mode": mode,
        "rc": res.rc,
        "wall_s": round(res.wall_s, 1),
        "peak_pss_gb": round(res.peak_tree_pss / 1e9, 2),
        "cpu_s": round(res.cpu_tree_s, 1),
        "exported_rows": exported,
        "export_digest": digest,
    }


def ratios(runs: list[dict], mode: str) -> dict | None:
    """Memory and time of the largest size against the smallest, for one mode (None: too few runs)."""
    ok = sorted((r for r in runs if r["mode"] == mode and r["rc"] == 0), key=lambda r: r["rows"])
    if len(ok) < 2:
        return None
    small, big = ok[0], ok[-1]
    linear = small["wall_s"] * big["rows"] / small["rows"]
    return {
        "mode": mode,
        "from_rows": small["rows"],
        "to_rows": big["rows"],
        "pss_ratio": round(big["peak_pss_gb"] / small["peak_pss_gb"], 2),
        "time_over_linear": round(big["wall_s"] / linear, 2),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 3_000_000, 10_000_000])
    p.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    p.add_argument("--data-dir", default=os.path.join(RESULTS_DIR, "data"), help="where corpora are cached")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--out", default=os.path.join(RESULTS_DIR, "scale"))
    p.add_argument("--timeout", type=float, default=3600)
    args = p.parse_args(argv)
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    runs = []
    for rows in args.sizes:
        data, gen_s = ensure_corpus(os.path.abspath(args.data_dir), rows, args.seed)
        if gen_s:
            print(f"generated {rows:,} rows in {gen_s:.0f}s ({os.path.getsize(data) / 1e9:.2f} GB)", flush=True)
        for mode in args.modes:
            run = run_one(out, data, rows, mode, args.timeout)
            print(f"{rows:,} {mode}: rc={run['rc']} {run['wall_s']}s {run['peak_pss_gb']} GB", flush=True)
            runs.append(run)
    same = {}
    for rows in args.sizes:
        digests = {r["export_digest"] for r in runs if r["rows"] == rows}
        same[rows] = len(digests) == 1 and None not in digests
    cols = ["rows", "mode", "rc", "wall_s", "peak_pss_gb", "cpu_s", "exported_rows"]
    print(
        md_table(
            cols + ["same export"],
            [[f"{r[c]:,}" if c == "rows" else str(r[c]) for c in cols] + [str(same[r["rows"]])] for r in runs],
        )
    )
    found = [x for x in (ratios(runs, m) for m in args.modes) if x]
    if found:
        keys = list(found[0])
        print(md_table(keys, [[str(x[k]) for k in keys] for x in found]))
    panels = [
        {
            "title": "wall time (s)",
            "bars": [(f"{r['rows']:,} rows, {r['mode']}", r["wall_s"] if r["rc"] == 0 else None) for r in runs],
            "fmt": "{:,.0f}",
            "unit": " s",
        },
        {
            "title": "peak PSS of the process tree (GB)",
            "bars": [(f"{r['rows']:,} rows, {r['mode']}", r["peak_pss_gb"] if r["rc"] == 0 else None) for r in runs],
            "unit": " GB",
        },
    ]
    write_chart(
        os.path.join(out, "scale.svg"),
        "The spine recipe through dj-airflow run, by corpus size",
        "auto: partitions of at most 50,000 rows; manual4: 4 partitions; 2 cores, 24 GB",
        panels,
    )
    write_json(os.path.join(out, "scale.json"), {"runs": runs, "same_export": same, "ratios": found})
    return 0 if all(r["rc"] == 0 for r in runs) and all(same.values()) else 1
