"""Per-row lineage's cost: the same job with lineage off (DJ_LINEAGE=0) and on, engine in-process.

No Airflow, no Ray: the engine's local executor (engine.run_job, partitions in this process),
timed end to end, runs interleaved (off, on, off, on, ...) so drifting machine load hits both alike.
Prints the times, the ratios, the lineage's bytes per input row and how long ``why`` takes to answer
for one row (its export row needs every partition's lineage).

Three ratios, because on a shared 2-core machine identical runs differ by more than lineage costs:
the best-of wall ratio; the median of the pairs' wall ratios (each round's "on" against the same
round's "off", so a slow minute hits one pair, not the headline); and the ratio of the process's CPU
seconds (every thread; the engine runs in this one process), which other tenants' load barely moves.
Usage::

    .venv/bin/python -m bench lineage --rows 1000000 --partitions 4 --repeat 2
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
import time

import pyarrow.compute as pc

from airflow_provider_dj import settings
from airflow_provider_dj.engine.jobdir.layout import LINEAGE_DIR
from airflow_provider_dj.engine.observe.lineage_query import JobLineage, why
from airflow_provider_dj.testing.sample_corpus import write_corpus
from bench import _proc
from bench._inprocess_job import DEDUP_OPS, run_job, write_recipe

RECORDING_S = [0.0]  # seconds spent inside the recorder (observe + chunk writes), summed over threads


def _timed(fn):
    def run(*a, **k):
        t0 = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            RECORDING_S[0] += time.perf_counter() - t0

    return run


def instrument() -> None:
    """Time the recorder's own work, which the wall times' noise on a shared machine can hide."""
    from airflow_provider_dj.engine.observe import lineage

    rec = lineage.LineageRecorder
    rec.observe = _timed(rec.observe)
    writer = rec.writer

    def timed_writer(self, op_index):
        w = writer(self, op_index)
        return None if w is None else _timed(w)

    rec.writer = timed_writer


def dir_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def one_run(
    tmp: str, data: str, parts: int, lineage: bool, tag: str, strategy: str, dedup: str = "exact"
) -> tuple[float, dict]:
    os.environ["DJ_LINEAGE"] = "1" if lineage else "0"
    settings.reset()
    recipe = write_recipe(tmp, data, tag, parts, strategy, dedup=dedup)
    RECORDING_S[0] = 0.0
    t0, c0 = time.perf_counter(), time.process_time()
    job_dir = run_job(recipe, tag, parts)
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    extra: dict = {"recording_s": RECORDING_S[0], "cpu_s": cpu}
    if lineage:
        jl = JobLineage(job_dir)
        extra["entries"] = sum(jl.of(p["partition_id"]).table.num_rows for p in jl.parts)
        extra["bytes"] = dir_bytes(os.path.join(job_dir, LINEAGE_DIR))
        tables = [jl.of(p["partition_id"]).table for p in jl.parts]
        dups = [t.filter(pc.equal(t.column("fate"), 3)) for t in tables]
        extra["duplicates"] = sum(d.num_rows for d in dups)
        extra["named"] = sum(
            d.num_rows - d.column("dup_of_row").null_count for d in dups if "dup_of_row" in d.column_names
        )
        last = jl.parts[-1]["end_row"] - 1
        t1 = time.perf_counter()
        [path] = why(job_dir, input_row=last)
        extra["why_s"] = time.perf_counter() - t1
        extra["why_fate"] = f"{path.fate} export row {path.export_row}"
    shutil.rmtree(job_dir)
    return dt, extra


def _child_run(args, tmp: str, data: str, mode: str) -> tuple[float, dict]:
    cmd = _proc.module_cmd("bench.lineage_bench", "--child", tmp, data, mode)
    cmd += ["--partitions", str(args.partitions), "--strategy", args.strategy, "--dedup", args.dedup]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=_proc.child_env()).stdout
    res = json.loads(out.strip().splitlines()[-1])
    return res.pop("wall_s"), res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--strategy", default="every_n_ops", help="checkpoint strategy (lineage commits with it)")
    ap.add_argument("--dedup", choices=sorted(DEDUP_OPS), default="exact", help="the deduplicator that ends the recipe")
    ap.add_argument("--only-on", action="store_true", help="lineage on only: its size, not its cost")
    ap.add_argument(
        "--fresh",
        action="store_true",
        help="each timed run in its own interpreter, pairs in alternating order (off-on, on-off, ...): "
        "nothing one run leaves in the heap or caches slows the next, and a drift hits both modes alike",
    )
    ap.add_argument("--child", nargs=3, metavar=("TMP", "DATA", "MODE"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:  # one timed run for --fresh, after a warm-up run in this interpreter; prints JSON
        tmp, data, mode = args.child
        instrument()
        warm = os.path.join(tmp, "warm.jsonl")
        one_run(tmp, warm, args.partitions, mode == "on", f"warm_{mode}_{os.getpid()}", args.strategy, args.dedup)
        dt, e = one_run(tmp, data, args.partitions, mode == "on", f"{mode}_{os.getpid()}", args.strategy, args.dedup)
        print(json.dumps({"wall_s": dt, **e}))
        return 0
    modes = ("on",) if args.only_on else ("off", "on")
    instrument()
    tmp = tempfile.mkdtemp(prefix="dj-lineage-bench-")
    data = write_corpus(os.path.join(tmp, "in.jsonl"), args.rows, seed=42)
    warm = write_corpus(os.path.join(tmp, "warm.jsonl"), 10_000, seed=1)
    if not args.fresh:
        for mode in modes:  # imports, caches and the writer thread warmed up before anything is timed
            one_run(tmp, warm, args.partitions, mode == "on", f"warm_{mode}", args.strategy, args.dedup)
    times: dict[str, list[float]] = {"off": [], "on": []}
    cpus: dict[str, list[float]] = {"off": [], "on": []}
    recs: list[dict] = []  # the "on" runs' figures (lineage size, why's time, the recorder's share)
    for r in range(args.repeat):
        order = modes if not args.fresh or r % 2 == 0 else tuple(reversed(modes))
        for mode in order:
            if args.fresh:
                dt, e = _child_run(args, tmp, data, mode)
            else:
                dt, e = one_run(tmp, data, args.partitions, mode == "on", f"{mode}{r}", args.strategy, args.dedup)
            times[mode].append(dt)
            cpus[mode].append(e["cpu_s"])
            if mode == "on":
                recs.append(e)
            rec = f", {e['recording_s']:.3f} s of it recording lineage" if mode == "on" else ""
            print(f"run {r} lineage {mode}: {dt:.3f} s wall, {e['cpu_s']:.3f} s CPU{rec}", flush=True)
    on, extra = min(times["on"]), recs[-1]
    print(
        f"rows={args.rows} partitions={args.partitions} strategy={args.strategy} dedup={args.dedup} "
        f"repeat={args.repeat} (best of){' fresh interpreter per run, pairs in alternating order' if args.fresh else ''}"
    )
    if not args.only_on:
        off = min(times["off"])
        print(f"lineage off: {off:.3f} s   all: {', '.join(f'{t:.3f}' for t in times['off'])}")
    print(f"lineage on : {on:.3f} s   all: {', '.join(f'{t:.3f}' for t in times['on'])}")
    if not args.only_on:
        pairs = sorted(b / a for a, b in zip(times["off"], times["on"]))
        cpu_off, cpu_on = statistics.median(cpus["off"]), statistics.median(cpus["on"])
        print(f"ratio on/off, best-of wall:        {on / off:.3f}  ({(on - off) * 1000:+.0f} ms)")
        print(
            f"ratio on/off, median of pairs:     {statistics.median(pairs):.3f}  "
            f"(pairs: {', '.join(f'{x:.3f}' for x in pairs)})"
        )
        print(
            f"ratio on/off, median CPU seconds:  {cpu_on / cpu_off:.3f}  ({cpu_off:.3f} s off, {cpu_on:.3f} s on; "
            f"recorder {statistics.median(r['recording_s'] for r in recs):.3f} s)"
        )
    print(f"duplicate entries: {extra['duplicates']} ({extra['named']} name the row they were kept against)")
    print(
        f"lineage files: {extra['bytes']} bytes = {extra['bytes'] / args.rows:.3f} bytes per input row; "
        f"{extra['entries']} entries ({extra['bytes'] / max(extra['entries'], 1):.2f} bytes per entry)"
    )
    print(f"why --row {args.rows - 1}: {extra['why_s'] * 1000:.0f} ms ({extra['why_fate']})")
    shutil.rmtree(tmp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
