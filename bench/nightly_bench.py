"""Nightly reuse across jobs: night 2 (night 1's files + 5 % new rows in new files, some exact and some
near duplicates of night-1 rows) against a from-scratch run of night 2's input and against Data-Juicer
1.6.1's default executor on the same input, all in the same bench run.

Our jobs run in-process through the engine's local executor (``engine.run_job``, partitions in this
process): no Airflow, no Ray.  A ``dj-airflow run`` adds its own fixed start-up on top (docs/benchmarks.md).

**Marginal time** (issue 14 item 6) is a run's wall time minus the fixed start-up of an empty run of the
same recipe, measured in the same bench run (ours: an empty input through the same engine calls; DJ: a
1-row input, since 1.6.1 fails on an empty one).  The export step is printed on its own too (bytes
written, time, MB/s): the issue allows the export copy to be linear in bytes, so the ratio night 2 /
scratch is printed with and without it.  ``--cli`` (the default) runs the same nights again through
``dj-airflow run`` (a process per job, the local executor with one worker), each against an empty-input
``dj-airflow run`` of the same bench run.

``--layouts`` (default ``file,partition_shards``) runs the nights once per ``export_layout``, each layout
in work dirs of its own (its own night 1, night 2 and from-scratch run), and prints night 2 / scratch
for each: the single-file export copies a reused partition's bytes into the new file, the
``partition_shards`` layout hard-links its shard.

    .venv/bin/python -m bench nightly --rows 1000000 --files 10
    ... --no-cli                     # in-process only
    .venv/bin/python -m bench nightly --rows 20000 --files 4 --size 2500   # quick
    ... --no-dj                      # ours only
    ... --profile-night2 night2.prof # cProfile of night 2 (the first layout's)
    ... --layouts file               # the single-file export only
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import xxhash
import yaml

from airflow_provider_dj.engine import run_job as run_engine_job
from airflow_provider_dj.engine.input import index_cache
from airflow_provider_dj.engine.jobdir.events import read_events
from airflow_provider_dj.engine.storage.context import JobContext
from airflow_provider_dj.testing.sample_corpus import write_corpus, write_growth_file
from bench import _nightly_dj
from bench.report import md_table

PROCESS = """process:
  - clean_email_mapper:
  - whitespace_normalization_mapper:
  - words_num_filter: {min_num: 5, max_num: 2000}
  - text_length_filter: {min_len: 50}
  - document_deduplicator: {lowercase: true}
  - words_num_filter: {min_num: 6}
"""
OPS = yaml.safe_load(PROCESS)["process"]  # the same ops and arguments for Data-Juicer
LAYOUTS = ("file", "partition_shards")  # export_layout values (docs/recipes.md)


def write_recipe(
    tmp: str, data: str, name: str, work: str, reuse: bool, size: int, layout: str = "file"
) -> tuple[str, str]:
    """The bench's recipe for one job: (recipe path, export path)."""
    recipe = os.path.join(tmp, f"{name}.yaml")
    export = os.path.join(tmp, f"{name}.jsonl")
    with open(recipe, "w") as fh:
        fh.write(
            f"dataset_path: {data}\nexport_path: {export}\nwork_dir: {work}\nexport_layout: {layout}\n"
            f"partition: {{mode: manual, size: {size}, align: file}}\n"
            f"intermediate_storage: {{reuse_across_jobs: {str(reuse).lower()}}}\n{PROCESS}"
        )
    return recipe, export


def settle_disk() -> None:
    """Write back what earlier runs left dirty before a timed run: a from-scratch run leaves gigabytes
    of checkpoints and export in the page cache, and their writeback would otherwise be paid by
    whichever run comes next (its fsyncs wait for the disk)."""
    os.sync()


def run_cli_job(tmp: str, data: str, name: str, work: str, reuse: bool, size: int, layout: str = "file") -> dict:
    """The same job through ``dj-airflow run`` (a new process: its start-up included), on the engine's
    local executor with one worker, as ``run_job`` runs it in this process."""
    recipe, export = write_recipe(tmp, data, f"cli_{name}", work, reuse, size, layout)
    dj = os.path.join(os.path.dirname(sys.executable), "dj-airflow")
    cmd = [dj, "run", recipe, "--job-id", f"cli_{name}", "--executor", "local", "--num-cpus", "1"]
    settle_disk()
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(
            f"dj-airflow run of {name} failed ({proc.returncode}):\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
        )
    job_dir = os.path.join(work, f"cli_{name}")
    export_start = read_events(job_dir, "export_start")[-1]["timestamp"]
    export_s = read_events(job_dir, "job_complete")[-1]["timestamp"] - export_start
    print(f"cli {name}: {wall:.2f} s (export step {export_s:.2f} s)", flush=True)
    with open(os.path.join(job_dir, "job_summary.json"), encoding="utf-8") as fh:
        summary = json.load(fh)
    return {"wall": wall, "export_s": export_s, "summary": summary, "path": export}


def run_job(
    tmp: str, data: str, name: str, work: str, reuse: bool, size: int, profile: str | None = None, layout: str = "file"
) -> dict:
    """One job through the engine; wall time split into planning + ops and the export step."""
    recipe, export = write_recipe(tmp, data, name, work, reuse, size, layout)
    prof = cProfile.Profile() if profile else None
    settle_disk()
    if prof:
        prof.enable()
    t0 = time.perf_counter()
    result = run_engine_job(recipe, job_id=name, workers=1, say=lambda _msg: None)
    t2 = time.perf_counter()
    ctx = JobContext(result.job_dir)
    summary = result.summary
    export_start = read_events(result.job_dir, "export_start")[-1]["timestamp"]
    t1 = t2 - (read_events(result.job_dir, "job_complete")[-1]["timestamp"] - export_start)
    if prof:
        prof.disable()
        prof.dump_stats(profile)
    timing = ctx.partitioning_info["timing"]
    print(
        f"{name}: {t2 - t0:.2f} s (planning: index {timing['index_s']:.2f} s + hashing {timing['hash_s']:.2f} s "
        f"of {timing['hashed_bytes'] / 1e6:.1f} MB; export step {t2 - t1:.2f} s); "
        f"{summary['input']['total_rows']:,} rows in, {summary['export']['rows']:,} out; "
        f"input index cache {timing.get('index_cache')}",
        flush=True,
    )
    return {"wall": t2 - t0, "export_s": t2 - t1, "summary": summary, "path": export}


def integer_ids(path: str, base: int) -> None:
    """The growth file's ids are strings ("1000-7") where night 1's are integers; our align: file keeps
    the types apart per file, but Data-Juicer loads every row into one Arrow table and fails on the mixed
    types. Integer ids (``base + i``) give both executors the same, loadable input."""
    with open(path, encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh]
    with open(path, "w", encoding="utf-8") as fh:
        for i, row in enumerate(rows):
            row["id"] = base + i
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")


def fmt_s(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f} s"


def ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or b is None or b <= 0 else f"{a / b:.3f}"


def export_digest(path: str) -> str:
    """xxh3-128 of an export as a reader gets it: the file, or the shards its manifest names, in order."""
    h = xxhash.xxh3_128()
    if os.path.exists(path):
        files = [path]
    else:
        stem = os.path.join(os.path.dirname(path), os.path.basename(path).split(".")[0])
        with open(f"{stem}.manifest.json", encoding="utf-8") as fh:
            files = [os.path.join(os.path.dirname(path), s["file"]) for s in json.load(fh)["shards"]]
    for name in files:
        with open(name, "rb") as fh:
            while chunk := fh.read(16 << 20):
                h.update(chunk)
    return h.hexdigest()


def write_night1_inputs(root: str, rows: int, files: int) -> tuple[str, str, list[str]]:
    """Under ``root``: an empty input folder, night 1's ``files`` files of ``rows`` rows in all, and
    (returned) the texts night 2's growth file duplicates.  Returns (empty folder, data folder, texts)."""
    empty_dir = os.path.join(root, "empty_in")
    os.makedirs(empty_dir)
    open(os.path.join(empty_dir, "part_0000.jsonl"), "w").close()
    data = os.path.join(root, "in")
    per = rows // files
    for i in range(files):
        write_corpus(os.path.join(data, f"part_{i:04d}.jsonl"), per, seed=i)
    with open(os.path.join(data, "part_0000.jsonl")) as fh:
        texts = [json.loads(line)["text"] for _, line in zip(range(20_000), fh)]
    # A nightly job's files arrived before it started: let their timestamps settle past the input
    # index cache's racy margin (engine/input/index_cache.py), or night 1 could not cache them.
    time.sleep(index_cache.RACY_MARGIN_NS / 1e9 + 0.1)
    return empty_dir, data, texts


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000, help="night 1's rows")
    ap.add_argument("--files", type=int, default=10, help="night 1's input files")
    ap.add_argument("--size", type=int, default=50_000, help="partition.size (rows)")
    ap.add_argument("--growth", type=float, default=0.05, help="night 2's new rows, as a share of night 1's")
    ap.add_argument("--dj", action=argparse.BooleanOptionalAction, default=True, help="run Data-Juicer 1.6.1 too")
    ap.add_argument("--dj-np", type=int, default=os.cpu_count() or 1, help="Data-Juicer's np (default: the cores)")
    ap.add_argument("--dj-timeout", type=float, default=3600, help="seconds before a Data-Juicer run is stopped")
    ap.add_argument("--profile-night2", metavar="PATH", help="write a cProfile of night 2 to PATH")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir (printed)")
    ap.add_argument(
        "--cli", action=argparse.BooleanOptionalAction, default=True, help="the same nights through dj-airflow run"
    )
    ap.add_argument(
        "--layouts",
        default=",".join(LAYOUTS),
        help="export_layout values to run, comma-separated, each in work dirs of its own (default: %(default)s)",
    )
    args = ap.parse_args(argv)
    args.layouts = [x for x in args.layouts.split(",") if x]
    if not args.layouts or set(args.layouts) - set(LAYOUTS):
        ap.error(f"--layouts: one or more of {', '.join(LAYOUTS)}, got {args.layouts}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.dj and not os.path.exists(_nightly_dj.DJ_PROCESS):
        sys.exit(f"{_nightly_dj.DJ_PROCESS} not found: pass --no-dj")
    tmp = tempfile.mkdtemp(prefix="dj_nightly_bench_")
    load = [f"{x:.1f}" for x in os.getloadavg()]
    print(
        f"rows {args.rows:,} in {args.files} files, partition.size {args.size:,}, growth {args.growth:.0%}; "
        f"layouts {', '.join(args.layouts)}; {os.cpu_count()} cores, load average before {' '.join(load)}",
        flush=True,
    )
    try:
        empty_dir, data, texts = write_night1_inputs(tmp, args.rows, args.files)
        cold = run_job(tmp, empty_dir, "empty_cold", os.path.join(tmp, "empty_work"), False, args.size)
        runs = {lay: {"cli": {}} for lay in args.layouts}
        for lay, r in runs.items():  # night 1 of every layout before night 2's files arrive
            t = "" if lay == "file" else f"_{lay}"
            r["n1"] = run_job(tmp, data, f"night1{t}", os.path.join(tmp, f"work{t}"), True, args.size, layout=lay)
            if args.cli:  # night 1 through the CLI, in a work dir of its own
                if "empty" not in runs[args.layouts[0]]["cli"]:
                    empty_cli = run_cli_job(
                        tmp, empty_dir, "empty", os.path.join(tmp, "cli_empty_work"), False, args.size
                    )
                r["cli"]["empty"] = empty_cli
                r["cli"]["n1"] = run_cli_job(
                    tmp, data, f"night1{t}", os.path.join(tmp, f"cli_work{t}"), True, args.size, lay
                )
        # The fixed cost of one more job in this (warm) process, as night 2 and scratch run; the cold
        # run's extra is the first job's imports.
        empty = run_job(tmp, empty_dir, "empty", os.path.join(tmp, "empty_work"), False, args.size)
        print(f"empty input: {fmt_s(cold['wall'])} as the first job, {fmt_s(empty['wall'])} warm", flush=True)
        new_rows = int(args.rows * args.growth)
        n_new = max(1, round(args.files * args.growth))
        for j in range(n_new):
            grown = os.path.join(data, f"part_{args.files + j:04d}.jsonl")
            write_growth_file(grown, texts, new_rows // n_new, seed=1000 + j)
            integer_ids(grown, base=(1000 + j) * 10**7)
        for n, (lay, r) in enumerate(runs.items()):
            night2_and_scratch(args, tmp, data, lay, r, args.profile_night2 if n == 0 else None)
        first = runs[args.layouts[0]]
        dj = dj_start = cmp = None
        if args.dj:
            dj_in = os.path.join(tmp, "dj_in")
            os.makedirs(dj_in)
            one = os.path.join(dj_in, "one_row.jsonl")
            full = os.path.join(dj_in, "night2.jsonl")
            _nightly_dj.concat_inputs(data, one, max_rows=1)
            _nightly_dj.concat_inputs(data, full)
            dj_start = _nightly_dj.run_dj(tmp, "one_row", one, OPS, args.dj_np, args.dj_timeout)
            print(f"DJ 1-row run: {fmt_s(dj_start['wall_s'])}, exit {dj_start['rc']}", flush=True)
            dj = _nightly_dj.run_dj(tmp, "night2", full, OPS, args.dj_np, args.dj_timeout)
            print(f"DJ night 2 input: {fmt_s(dj['wall_s'])}, exit {dj['rc']} (log {dj['log']})", flush=True)
            if dj["rc"] == 0 and os.path.exists(first["sc"]["path"]):
                cmp = _nightly_dj.compare_rows(first["sc"]["path"], dj["export"])
        for lay, r in runs.items():
            print(f"\n## export_layout: {lay}")
            report(args, empty, r["n1"], r["n2"], r["sc"], r["same"], dj if r is first else None, dj_start, cmp)
            if r["cli"]:
                report_cli(r["cli"], r["n2"], r["sc"], empty)
        report_layouts(runs, empty)
    finally:
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


def night2_and_scratch(args, tmp: str, data: str, lay: str, r: dict, profile: str | None) -> None:
    """Night 2 and the from-scratch run of one layout, in-process and (``--cli``) through dj-airflow run;
    whether each export equals the first from-scratch export (the same bytes, however laid out)."""
    t = "" if lay == "file" else f"_{lay}"
    r["n2"] = run_job(tmp, data, f"night2{t}", os.path.join(tmp, f"work{t}"), True, args.size, profile, lay)
    r["sc"] = run_job(tmp, data, f"scratch{t}", os.path.join(tmp, f"scratch_work{t}"), False, args.size, layout=lay)
    want = export_digest(r["sc"]["path"])
    r["same"] = export_digest(r["n2"]["path"]) == want
    if args.cli:
        cli = r["cli"]
        cli["n2"] = run_cli_job(tmp, data, f"night2{t}", os.path.join(tmp, f"cli_work{t}"), True, args.size, lay)
        cli["sc"] = run_cli_job(
            tmp, data, f"scratch{t}", os.path.join(tmp, f"cli_scratch_work{t}"), False, args.size, lay
        )
        cli["same"] = export_digest(cli["n2"]["path"]) == want


def report_layouts(runs: dict, empty: dict) -> None:
    """Night 2 / scratch, marginal with the export, per layout, in-process and through dj-airflow run."""
    rows = []
    for lay, r in runs.items():
        m_in = ratio(r["n2"]["wall"] - empty["wall"], r["sc"]["wall"] - empty["wall"])
        cli = r["cli"]
        start = cli["empty"]["wall"] if cli else None
        m_cli = ratio(cli["n2"]["wall"] - start, cli["sc"]["wall"] - start) if cli else "-"
        reuse = r["n2"]["summary"].get("reuse") or {}
        linked = reuse.get("export_shards_linked")
        rows.append(
            [
                lay,
                fmt_s(r["n2"]["export_s"]),
                fmt_s(r["sc"]["export_s"]),
                m_in,
                m_cli,
                f"{reuse.get('export_parts_reused')} ({linked} linked)"
                if linked is not None
                else str(reuse.get("export_parts_reused")),
            ]
        )
    print()
    header = ["export_layout", "night 2 export step", "scratch export step", "in-process", "dj-airflow run", "parts"]
    print("night 2 / scratch, marginal, export included (aim: <= 0.15):")
    print(md_table(header, rows))


def report(args, empty, n1, n2, sc, same, dj, dj_start, cmp) -> None:
    start = empty["wall"]
    s2 = n2["summary"]
    mb = s2["export"]["bytes"] / 1e6

    def marginal(r):
        return r["wall"] - start

    def marginal_no_export(r):
        return r["wall"] - start - r["export_s"]

    dj_ok = dj is not None and dj["rc"] == 0 and dj_start["rc"] == 0
    dj_m = dj["wall_s"] - dj_start["wall_s"] if dj_ok else None
    print()
    print(f"load average after: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print(
        f"night 1: {n1['summary']['input']['total_rows']:,} rows in {n1['summary']['input']['partitions']} "
        f"partitions: {fmt_s(n1['wall'])}"
    )
    print(
        f"night 2 input: {s2['input']['total_rows']:,} rows in {s2['input']['partitions']} partitions; "
        f"export {s2['export']['rows']:,} rows, {mb:.1f} MB"
    )
    print(f"night 2 reuse: {s2['reuse']}")
    print()
    table = []
    for label, r in (("night 2, ours (reuse)", n2), ("from scratch, ours", sc)):
        exp_rate = r["summary"]["export"]["bytes"] / 1e6 / max(r["export_s"], 1e-9)
        table.append(
            [
                label,
                fmt_s(r["wall"]),
                f"{fmt_s(start)} (empty input)",
                fmt_s(marginal(r)),
                f"{fmt_s(r['export_s'])} ({exp_rate:.0f} MB/s)",
                fmt_s(marginal_no_export(r)),
            ]
        )
    if dj is not None:
        dj_wall = f"> {dj['timeout_s']:.0f} s (stopped)" if dj["rc"] == "timeout" else fmt_s(dj["wall_s"])
        table.append(
            [
                f"from scratch, Data-Juicer 1.6.1 (np={args.dj_np})",
                dj_wall,
                f"{fmt_s(dj_start['wall_s'])} (1-row input)",
                fmt_s(dj_m),
                "(inside)",
                "-",
            ]
        )
    header = ["run", "wall", "fixed start-up", "marginal", "export step", "marginal without export"]
    print(md_table(header, table))
    print()
    print(f"night 2 / scratch (ours), wall: {ratio(n2['wall'], sc['wall'])}")
    print(f"night 2 / scratch (ours), marginal: {ratio(marginal(n2), marginal(sc))}  (aim: <= 0.15)")
    print(
        f"night 2 / scratch (ours), marginal without the export step: "
        f"{ratio(marginal_no_export(n2), marginal_no_export(sc))}"
    )
    if dj is not None:
        print(
            f"night 2 (ours) / Data-Juicer from scratch, wall: {ratio(n2['wall'], dj['wall_s'])}; "
            f"marginal: {ratio(marginal(n2), dj_m)}"
        )
        print(
            f"scratch (ours) / Data-Juicer from scratch, wall: {ratio(sc['wall'], dj['wall_s'])}; "
            f"marginal: {ratio(marginal(sc), dj_m)}"
        )
    print(f"exports byte-identical (night 2, scratch): {same}")
    if cmp is not None:
        print(
            f"Data-Juicer's export against ours: {cmp['status']}: {cmp['detail']}; ours {cmp['ours_rows']:,} "
            f"rows, DJ {cmp['dj_rows']:,}; fields only in ours {cmp['fields_only_ours']}, "
            f"only in DJ {cmp['fields_only_dj']}"
        )
    elif dj is not None:
        print(f"Data-Juicer failed (exit {dj['rc']}); see {dj['log']} (--keep keeps it)")


def report_cli(cli: dict, n2: dict, sc: dict, empty: dict) -> None:
    """Night 2 against from scratch through ``dj-airflow run``, beside the in-process figures."""
    start = cli["empty"]["wall"]
    rows = []
    for label, r, base in (
        ("night 2, dj-airflow run", cli["n2"], start),
        ("from scratch, dj-airflow run", cli["sc"], start),
        ("night 2, in-process", n2, empty["wall"]),
        ("from scratch, in-process", sc, empty["wall"]),
    ):
        rows.append([label, fmt_s(r["wall"]), fmt_s(base), fmt_s(r["wall"] - base), fmt_s(r["export_s"])])
    print()
    print(md_table(["run", "wall", "empty-input run", "marginal", "export step"], rows))
    m_cli = ratio(cli["n2"]["wall"] - start, cli["sc"]["wall"] - start)
    m_in = ratio(n2["wall"] - empty["wall"], sc["wall"] - empty["wall"])
    print(f"night 2 / scratch, marginal, export included: dj-airflow run {m_cli}, in-process {m_in}  (aim: <= 0.15)")
    print(f"dj-airflow run's night 2 export equals the in-process scratch export: {cli['same']}")


if __name__ == "__main__":
    sys.exit(main())
