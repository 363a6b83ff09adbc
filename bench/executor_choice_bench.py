"""Ray only where it pays: the nightly pattern through ``dj-airflow run`` with ``--executor auto`` (the
default) against ``--executor ray``, in the same bench run.

Night 1 is ``--files`` files of ``--rows`` rows in all; night 2 adds one file of ``--growth`` of that; the
recipe has the nightly keys the docs name (``partition.align: file``, ``reuse_across_jobs``, the default
single-file export).  For each executor: night 1, night 2 in the same work dir, night 2's input from
scratch in a fresh one, a one-row input and an empty one, each a new ``dj-airflow run`` process (its
start-up included).  Printed: wall times, night 2 / scratch per executor, and whether every export of a
night equals the other executor's byte for byte.

    .venv/bin/python -m bench executor-choice                      # 600k rows in 10 files, 30k new
    .venv/bin/python -m bench executor-choice --rows 100000 --files 4   # quick
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import xxhash

from airflow_provider_dj.testing.sample_corpus import write_corpus, write_growth_file
from bench.report import md_table

RECIPE = """\
project_name: executor_choice
dataset_path: {data}
export_path: {export}
work_dir: {work}
partition: {{mode: manual, size: {size}, align: file}}
intermediate_storage: {{reuse_across_jobs: true}}
export_layout: {layout}
process:
  - clean_email_mapper:
  - whitespace_normalization_mapper:
  - words_num_filter: {{min_num: 5, max_num: 2000}}
  - document_deduplicator: {{lowercase: true}}
"""


LAYOUT = {"value": "file"}


def _export_digest(export: str) -> str:
    """The export's xxh3: the file's, or with ``partition_shards`` its manifest's whole-set checksum."""
    if LAYOUT["value"] == "partition_shards":
        from airflow_provider_dj.engine.output.shards import manifest_path, read_manifest

        return str(read_manifest(manifest_path(export))["checksum_xxh3_128"])
    with open(export, "rb") as fh:
        return xxhash.xxh3_128_hexdigest(fh.read())


def _run(tmp: str, executor: str, name: str, data: str, work: str, size: int) -> tuple[float, str]:
    """One ``dj-airflow run`` process; (wall seconds, the export's xxh3)."""
    recipe = os.path.join(tmp, f"{executor}_{name}.yaml")
    export = os.path.join(tmp, f"{executor}_{name}.jsonl")
    with open(recipe, "w") as fh:
        fh.write(RECIPE.format(data=data, export=export, work=work, size=size, layout=LAYOUT["value"]))
    dj = os.path.join(os.path.dirname(sys.executable), "dj-airflow")
    os.sync()  # the previous run's writeback is not this run's cost
    t0 = time.perf_counter()
    proc = subprocess.run([dj, "run", recipe, "--job-id", name, "--executor", executor], capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{executor} {name} failed ({proc.returncode}):\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    chose = next((ln.split("executor: ", 1)[1] for ln in proc.stdout.splitlines() if "executor: " in ln), "-")
    print(f"{executor:5} {name:8} {wall:6.2f} s  {chose}", flush=True)
    return wall, _export_digest(export)


def _inputs(tmp: str, rows: int, files: int, growth: float) -> dict[str, str]:
    night = os.path.join(tmp, "in")
    for i in range(files):
        write_corpus(os.path.join(night, f"day1_{i:02d}.jsonl"), rows // files, seed=i)
    with open(os.path.join(night, "day1_00.jsonl"), encoding="utf-8") as fh:
        texts = [json.loads(line)["text"] for line in fh]
    one, empty = os.path.join(tmp, "one", "x.jsonl"), os.path.join(tmp, "empty", "x.jsonl")
    write_corpus(one, 1, seed=99)
    os.makedirs(os.path.dirname(empty), exist_ok=True)
    open(empty, "w").close()
    return {"night": night, "texts": texts, "one": one, "empty": empty, "growth": int(rows * growth)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=600_000, help="night 1's rows")
    ap.add_argument("--files", type=int, default=10, help="night 1's files")
    ap.add_argument("--growth", type=float, default=0.05, help="night 2's new file, as a share of night 1's rows")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir (printed)")
    ap.add_argument("--layout", choices=("file", "partition_shards"), default="file", help="export_layout")
    args = ap.parse_args(argv)
    LAYOUT["value"] = args.layout
    tmp = tempfile.mkdtemp(prefix="dj-bench-exec-")
    try:
        inp = _inputs(tmp, args.rows, args.files, args.growth)
        size = args.rows // args.files
        results = {}
        new_file = os.path.join(inp["night"], "day2_00.jsonl")
        for executor in ("ray", "auto"):
            if os.path.exists(new_file):  # each executor's night 1 sees night 1's files only
                os.remove(new_file)
            night1 = _run(tmp, executor, "night1", inp["night"], os.path.join(tmp, f"work_{executor}"), size)
            write_growth_file(new_file, inp["texts"], inp["growth"], seed=7)  # the same file both times
            results[executor] = {"night1": night1, **_rest(tmp, executor, inp, size)}
        _report(results)
    finally:
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


def _rest(tmp: str, executor: str, inp: dict, size: int) -> dict[str, tuple[float, str]]:
    work = os.path.join(tmp, f"work_{executor}")
    return {
        "night2": _run(tmp, executor, "night2", inp["night"], work, size),
        "scratch": _run(tmp, executor, "scratch", inp["night"], os.path.join(tmp, f"scratch_{executor}"), size),
        "one_row": _run(tmp, executor, "one_row", inp["one"], os.path.join(tmp, f"one_{executor}"), size),
        "empty": _run(tmp, executor, "empty", inp["empty"], os.path.join(tmp, f"empty_{executor}"), size),
    }


def _report(results: dict) -> None:
    rows = []
    for name in ("night1", "night2", "scratch", "one_row", "empty"):
        r, a = results["ray"][name], results["auto"][name]
        rows.append([name, f"{r[0]:.2f}", f"{a[0]:.2f}", f"{a[0] / r[0]:.2f}", "yes" if r[1] == a[1] else "NO"])
    print(md_table(["run", "--executor ray (s)", "auto (s)", "auto / ray", "same export"], rows))
    for ex in ("ray", "auto"):
        n2, sc = results[ex]["night2"][0], results[ex]["scratch"][0]
        print(f"{ex}: night 2 / scratch = {n2 / sc:.2f}")
