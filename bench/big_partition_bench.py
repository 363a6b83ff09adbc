"""A partition with more than 2 GiB of text, through ``dj-airflow run``: it must finish, exactly.

Arrow's string arrays hold at most 2 GiB; a partition past that used to fail with
``ArrowCapacityError`` in the first op that combined its text column.  This section writes a corpus
of ``--rows`` rows of about ``--row-kb`` KiB (300,000 x 8 KiB: about 2.4 GB of text), one partition,
the spine recipe (clean_email, whitespace, words_num, text_length, document_deduplicator with
``lowercase``), and runs it on the engine's local executor in this machine's memory:

* ``sliced``: the default ``[dj] op_slice_mb``;
* ``unsliced`` (``--baseline``): ``op_slice_mb`` set past the partition, as before slicing existed.

Every row is unique except ``--dup-every``-th rows, which repeat an earlier row exactly; every row
passes both filters.  So the export must hold ``rows - duplicates`` rows, which the section checks.
It prints wall time and the peak PSS of the process tree.  Usage::

    .venv/bin/python -m bench big-partition [--rows 300000] [--row-kb 8] [--baseline] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys

from bench._measure import run_measured, tail
from bench._proc import RESULTS_DIR
from bench._recipes import spine_process_yaml
from bench.report import md_table, write_json

VENV_BIN = os.path.dirname(sys.executable)
RECIPE = """\
project_name: big_partition_bench
dataset_path: {data}
export_path: {out}/export_{label}.jsonl
work_dir: {out}/jobs
text_keys: text
partition:
  mode: manual
  num_of_partitions: 1
checkpoint:
  strategy: every_op
""" + spine_process_yaml(100000000)


def write_big_corpus(path: str, rows: int, row_kb: float, dup_every: int, seed: int = 7) -> tuple[int, int]:
    """Write the corpus; returns (bytes of text, duplicate rows)."""
    rng = random.Random(seed)
    words = "data corpus token train clean filter shard cluster quality sample Mail user@example.com".split()
    block = " ".join(rng.choice(words) for _ in range(4096))
    target = int(row_kb * 1024)
    text_bytes = dups = 0
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        for i in range(rows):
            if dup_every and i and i % dup_every == 0:
                src = rng.randrange(i)
                src -= 1 if src and src % dup_every == 0 else 0  # an original row, not an earlier copy
                dups += 1
            else:
                src = i
            start = (src * 7919) % max(1, len(block) - target)
            text = f"Document {src}. " + block[start : start + target]
            text_bytes += len(text)
            fh.write(json.dumps({"id": i, "text": text}) + "\n")
    os.replace(tmp, path)
    return text_bytes, dups


def run_one(out: str, data: str, label: str, slice_mb: str | None, timeout_s: float) -> dict:
    recipe = os.path.join(out, f"recipe_{label}.yaml")
    shutil.rmtree(os.path.join(out, "jobs", label), ignore_errors=True)  # a fresh job on a fresh corpus
    with open(recipe, "w") as fh:
        fh.write(RECIPE.format(data=data, out=out, label=label))
    env = dict(os.environ)
    if slice_mb is not None:
        env["DJ_OP_SLICE_MB"] = slice_mb
    cmd = [os.path.join(VENV_BIN, "dj-airflow"), "run", recipe, "--executor", "local", "--job-id", label]
    result = run_measured(cmd, env=env, log_path=os.path.join(out, f"{label}.log"), timeout_s=timeout_s)
    export = os.path.join(out, f"export_{label}.jsonl")
    exported = None
    if result.rc == 0 and os.path.exists(export):
        with open(export, "rb") as fh:
            exported = sum(1 for _ in fh)
    log_tail = tail(result.log_path, 200)
    capacity = "ArrowCapacityError" in log_tail or "might not fit in a 32bit" in log_tail
    return {
        "label": label,
        "rc": result.rc,
        "wall_s": round(result.wall_s, 1),
        "peak_pss_gb": round(result.peak_tree_pss / 1e9, 2),
        "exported_rows": exported,
        "capacity_error": capacity,
        "log": result.log_path,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=300_000)
    p.add_argument("--row-kb", type=float, default=8.0)
    p.add_argument("--dup-every", type=int, default=100, help="every N-th row repeats an earlier one (0: none)")
    p.add_argument("--baseline", action="store_true", help="also run with slicing off (expected to fail)")
    p.add_argument("--out", default=os.path.join(RESULTS_DIR, "big_partition"))
    p.add_argument("--timeout", type=float, default=3600)
    args = p.parse_args(argv)
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    data = os.path.join(out, "corpus.jsonl")
    text_bytes, dups = write_big_corpus(data, args.rows, args.row_kb, args.dup_every)
    print(f"corpus: {args.rows:,} rows, {text_bytes / (1 << 30):.2f} GiB of text, {dups:,} exact duplicates")
    runs = [run_one(out, data, "sliced", None, args.timeout)]
    if args.baseline:
        runs.append(run_one(out, data, "unsliced", "1000000", args.timeout))
    expected = args.rows - dups
    for r in runs:
        r["expected_rows"] = expected
        r["exact"] = r["exported_rows"] == expected
    cols = ["label", "rc", "wall_s", "peak_pss_gb", "exported_rows", "expected_rows", "exact", "capacity_error"]
    print(md_table(cols, [[str(r[c]) for c in cols] for r in runs]))
    write_json(os.path.join(out, "big_partition.json"), {"text_gib": text_bytes / (1 << 30), "runs": runs})
    return 0 if runs[0]["exact"] else 1
