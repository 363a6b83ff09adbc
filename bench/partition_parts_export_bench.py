"""The export step of ``export_layout: partition_shards`` from parallel parts: linked against copied.

The Ray workers' part files (engine/output/parts.py) each hold exactly one shard.  Since issue 35 point 4
the export process hard-links each part into the shard set (engine/job/export_shards.py) and only reads
it once for the set's checksum; before, it copied every part's bytes into the set (a second write and
fsync of the whole export).  This section measures the export step both ways on the same job, in the same
bench run, alternating the two so that a busy machine weighs on both alike:

* ``linked``: the engine as it is;
* ``copied``: the same engine with the parts copied through the shard writer, as before (the old loop,
  kept here only to measure against).

The job (``--rows`` rows of the sample corpus, ``--partitions`` partitions, one mapper) is computed once,
in-process.  Before each timed export the parts are written by the workers' own function, here, one
after another (their time is not the export step's: on a cluster they are written in parallel, while
the export consumes them), and ``os.sync()`` writes back what is dirty.  The export step is the
``export_complete`` event's ``duration`` (accounting check, shards, commit; not the summary).  Every
export's checksum must equal the first's.  Usage::

    .venv/bin/python -m bench parts-export [--rows 400000] [--partitions 8] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from contextlib import contextmanager
from typing import Iterator

from airflow_provider_dj.core import fs as storage
from airflow_provider_dj.engine import run_job
from airflow_provider_dj.engine.job import export_shards
from airflow_provider_dj.engine.job.export import export_job
from airflow_provider_dj.engine.jobdir.events import read_events
from airflow_provider_dj.engine.output.parts import write_part
from airflow_provider_dj.testing.sample_corpus import write_corpus

RECIPE = """\
project_name: parts_export_bench
dataset_path: {data}
export_path: {out}/export.jsonl
work_dir: {out}/jobs
export_layout: partition_shards
partition: {{mode: manual, num_of_partitions: {partitions}}}
process:
  - whitespace_normalization_mapper:
"""


def _copied_parts(part_source, writer, out, ledger, local) -> Iterator[int]:
    """Before issue 35 point 4: every part's bytes copied into the shard set through ``out``."""
    for part in part_source():
        with storage.open_read(part["path"]) as fh:
            for chunk in storage.iter_chunks(fh):
                out.write(chunk)
        yield part["rows"]


@contextmanager
def _copying():
    linked = export_shards._worker_parts
    export_shards._worker_parts = _copied_parts
    try:
        yield
    finally:
        export_shards._worker_parts = linked


def _export(job_dir: str, partitions: int, how: str) -> dict:
    """Write the parts (untimed), then one timed export; its step time, wall time and checksum."""
    parts = [write_part(job_dir, pid) for pid in range(partitions)]
    os.sync()
    t0 = time.perf_counter()
    if how == "copied":
        with _copying():
            summary = export_job(job_dir, part_source=lambda: iter(parts))
    else:
        summary = export_job(job_dir, part_source=lambda: iter(parts))
    wall = time.perf_counter() - t0
    event = read_events(job_dir, "export_complete")[-1]
    return {"step": event["duration"], "wall": wall, "checksum": summary["export"]["checksum_xxh3_128"]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--rows", type=int, default=400_000)
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3, help="timed exports each way, alternating")
    ap.add_argument("--out", help="work here (kept) instead of a temp dir (removed)")
    args = ap.parse_args(argv)
    out = args.out or tempfile.mkdtemp(prefix="dj_parts_export_bench_")
    try:
        data = write_corpus(os.path.join(out, "in.jsonl"), args.rows)
        recipe = os.path.join(out, "r.yaml")
        with open(recipe, "w", encoding="utf-8") as fh:
            fh.write(RECIPE.format(data=data, out=out, partitions=args.partitions))
        result = run_job(recipe, job_id="bench", workers=1, say=lambda _msg: None)
        nbytes = result.summary["export"]["bytes"]
        load = " ".join(f"{x:.1f}" for x in os.getloadavg())
        print(f"{args.rows:,} rows, {args.partitions} partitions, export {nbytes / 1e6:.1f} MB; load {load}")
        times: dict[str, list[dict]] = {"copied": [], "linked": []}
        for _ in range(args.repeats):
            for how in times:
                times[how].append(_export(result.job_dir, args.partitions, how))
                print(f"  {how}: step {times[how][-1]['step']:.3f} s, wall {times[how][-1]['wall']:.3f} s")
        sums = {r["checksum"] for rs in times.values() for r in rs} | {result.summary["export"]["checksum_xxh3_128"]}
        if len(sums) != 1:
            raise SystemExit(f"the exports differ: {sorted(sums)}")
        print("| export step | median | min | MB/s (median) |\n|---|---|---|---|")
        for how, rs in times.items():
            med = statistics.median(r["step"] for r in rs)
            print(f"| {how} | {med:.3f} s | {min(r['step'] for r in rs):.3f} s | {nbytes / 1e6 / med:,.0f} |")
        print("all exports byte-identical (one checksum)")
    finally:
        if not args.out:
            shutil.rmtree(out, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
