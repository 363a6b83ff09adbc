"""All benchmarks behind one entry point, each against a baseline measured in the same run.

Sections (bench/_sections.py), in order:
  checkpoint  checkpoint cost per strategy (every_op, every_n_ops, manual) on the
              spine recipe, as overhead ratios against ``disabled``;
  resume      resume of a completed job, and resume after a mid-job SIGKILL of
              the whole run, as shares of the full run;
  scale       wall time and peak RSS/PSS of the process tree at 100k, 1M and 10M
              rows with a fixed partition size, then per partition size;
  ops         per-op throughput against Data-Juicer 1.6.1 (bench/ops/run_ops_bench.py).

    .venv/bin/python -m bench all                 # the full run (its duration is printed first)
    .venv/bin/python -m bench all --quick         # smoke run: small sizes, no Data-Juicer
    .venv/bin/python -m bench all --only checkpoint resume
    .venv/bin/python -m bench all --render bench/results/<ts>/results.json --publish

Writes <out>/results.json, one <section>.json each, report.md and report.svg;
--publish copies the report to docs/benchmarks_gathered.md and the chart to
docs/img/benchmarks_gathered.svg.  See docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

try:
    import psutil
    import xxhash  # noqa: F401
    import yaml  # noqa: F401

    import airflow_provider_dj  # noqa: F401
except ImportError as _exc:  # pragma: no cover - wrong interpreter
    sys.exit(f"error: {_exc}. Run it with the project's virtualenv: {REPO}/.venv/bin/python -m bench all")

from bench import _sections, run_bench  # noqa: E402
from bench.report import gathered, write_json, write_text  # noqa: E402
from bench.run_bench import Bench, default_dj_venv, ensure_corpus, log, machine_info  # noqa: E402

SECTION_NAMES = ("checkpoint", "resume", "scale", "ops")
DOCS_REPORT = os.path.join(REPO, "docs", "benchmarks_gathered.md")
DOCS_PLOT = os.path.join(REPO, "docs", "img", "benchmarks_gathered.svg")

# Duration model for the up-front estimate, calibrated on a 2-core machine
# (docs/benchmarks.md: about 16 s fixed cost per dj-airflow run, about 26k
# rows/s marginal on the spine recipe; corpus generation about 22k rows/s;
# run_ops_bench.py at 200k rows about 8 min with Data-Juicer, ours alone about
# 1.1 ms per row and repeat).  Off by a factor on a different machine or under
# load; the run prints what it really took.
FIXED_S = 16.0
ROWS_PER_S = 26_000.0
GEN_ROWS_PER_S = 22_000.0
OPS_OURS_S_PER_ROW_REPEAT = 0.0011
OPS_DJ_S = 480.0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="What each section measures: docs/benchmarks.md (section 'Gathered run').",
    )
    p.add_argument("--sizes", type=int, nargs="+", help="scale section sizes in rows (default 100000 1000000 10000000)")
    p.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: sizes 20000 100000, checkpoint/resume at 100000 rows, 25000 rows per partition, "
        "per-op at 20000 rows, no Data-Juicer, no quiet-wait",
    )
    p.add_argument("--skip-dj", action="store_true", help="per-op section without Data-Juicer (ours only)")
    p.add_argument("--only", nargs="+", choices=SECTION_NAMES, help="run only these sections")
    p.add_argument("--out", help="results directory (default bench/results/<timestamp>/)")
    p.add_argument(
        "--data-dir",
        default=os.path.join(HERE, "results", "data"),
        help="corpus cache shared between runs (a 10M-row corpus is 6.6 GB; generated once)",
    )
    p.add_argument("--ck-rows", type=int, help="rows for the checkpoint and resume sections (default 1000000)")
    p.add_argument("--repeats", type=int, default=1, help="checkpoint sweep: best of N per strategy (round-robin)")
    p.add_argument("--partition-rows", type=int, help="scale section: rows per partition (default 250000)")
    p.add_argument(
        "--sweep-at",
        type=int,
        help="scale section: input size of the partition-size sweep (default: the largest of --sizes up to 1000000)",
    )
    p.add_argument("--ops-rows", type=int, help="per-op section corpus size (default 200000)")
    p.add_argument("--ops-repeats", type=int, help="per-op section: ours best of N (default 3)")
    p.add_argument(
        "--dj-python",
        default=os.environ.get("DJ_PYTHON", os.path.join(default_dj_venv(), "bin", "python")),
        help="Data-Juicer's interpreter for the per-op section",
    )
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--nice", type=int, default=0, help="autogroup nice of every measured run (see bench/README.md)")
    p.add_argument(
        "--quiet-wait",
        type=float,
        help="before each run wait up to S s for other load to drop (default 60; 0 with --quick)",
    )
    p.add_argument("--quiet-threshold", type=float, default=0.25)
    p.add_argument("--timeout-scale", type=float, default=1.0)
    p.add_argument("--infra-retries", type=int, default=2)
    p.add_argument("--keep-work", action="store_true", help="keep job directories (checkpoints) after each run")
    p.add_argument(
        "--snapshot",
        action="store_true",
        help="benchmark the committed code (git archive of HEAD's airflow_provider_dj/ first on "
        "PYTHONPATH), so edits made to the working tree during the run do not leak in",
    )
    p.add_argument("--estimate-only", action="store_true", help="print the plan and its expected duration, then stop")
    p.add_argument("--render", metavar="JSON", help="only re-render report.md/report.svg from an earlier results.json")
    p.add_argument(
        "--publish",
        action="store_true",
        help="copy the report to docs/benchmarks_gathered.md and the chart to docs/img/",
    )
    a = p.parse_args(argv)
    q = a.quick
    a.sizes = sorted(set(a.sizes or ([20_000, 100_000] if q else [100_000, 1_000_000, 10_000_000])))
    a.ck_rows = a.ck_rows or (100_000 if q else 1_000_000)
    a.partition_rows = a.partition_rows or (25_000 if q else 250_000)
    a.ops_rows = a.ops_rows or (20_000 if q else 200_000)
    a.ops_repeats = a.ops_repeats or (1 if q else 3)
    a.skip_dj = a.skip_dj or q
    a.quiet_wait = (0.0 if q else 60.0) if a.quiet_wait is None else a.quiet_wait
    a.sweep_at = a.sweep_at or max([n for n in a.sizes if n <= 1_000_000] or a.sizes[:1])
    a.sections = [s for s in SECTION_NAMES if not a.only or s in a.only]
    bad = [n for n in a.sizes + [a.ck_rows, a.partition_rows, a.ops_rows] if n < 1]
    if bad:
        p.error(f"sizes must be positive, got {bad}")
    if a.ck_rows < 4:
        p.error("--ck-rows must be at least 4 (the spine recipe has 4 partitions)")
    return a


def plan(a: argparse.Namespace) -> dict:
    """The runs this invocation will make and their expected seconds (see the duration model above)."""
    runs: list[tuple[str, int, float]] = [("warm-up", 1, 1.0)]
    if "checkpoint" in a.sections:
        runs += [(f"checkpoint {s}", a.ck_rows, 1.0) for s in _sections.STRATEGIES for _ in range(a.repeats)]
    if "resume" in a.sections:
        if "checkpoint" not in a.sections:
            runs.append(("resume: full run", a.ck_rows, 1.0))
        runs += [
            ("resume: completed job", a.ck_rows, 0.05),
            ("resume: killed run", a.ck_rows, 0.35),
            ("resume: after kill", a.ck_rows, 0.7),
        ]
    if "scale" in a.sections:
        runs += [(f"scale {n}", n, 1.0) for n in a.sizes]
        runs += [(f"scale {a.sweep_at} x{f:g}", a.sweep_at, 1.0) for f in (0.5, 2.0)]
    est = [(label, n, FIXED_S + a.quiet_wait / 2 + n * frac / ROWS_PER_S) for label, n, frac in runs]
    need = {a.ck_rows} if {"checkpoint", "resume"} & set(a.sections) else set()
    if "scale" in a.sections:
        need |= set(a.sizes) | {a.sweep_at}
    if "ops" in a.sections:
        need.add(a.ops_rows)
    gen = [n for n in sorted(need) if not os.path.exists(os.path.join(a.data_dir, f"corpus_{n}_s{a.seed}.jsonl"))]
    gen_s = sum(gen) / GEN_ROWS_PER_S
    ops_s = 0.0
    if "ops" in a.sections:
        ops_s = a.ops_rows * a.ops_repeats * OPS_OURS_S_PER_ROW_REPEAT + (0 if a.skip_dj else OPS_DJ_S)
    total = sum(s for _, _, s in est) + gen_s + ops_s
    return {
        "runs": est,
        "generate_rows": gen,
        "generate_s": gen_s,
        "ops_s": ops_s,
        "total_s": total,
        "corpus_sizes": sorted(need),
    }


def print_plan(pl: dict) -> None:
    log(
        f"plan: {len(pl['runs'])} dj-airflow runs, corpora to generate: "
        f"{', '.join(f'{n:,}' for n in pl['generate_rows']) or 'none (cached)'}"
    )
    for label, n, s in pl["runs"]:
        log(f"      {label:<28} {n:>11,} rows  ~{s:6.0f} s")
    if pl["generate_s"]:
        log(f"      {'corpus generation':<28} {sum(pl['generate_rows']):>11,} rows  ~{pl['generate_s']:6.0f} s")
    if pl["ops_s"]:
        log(f"      {'per-op bench':<28} {'':>11}       ~{pl['ops_s']:6.0f} s")
    log(
        f"EXPECTED DURATION: about {pl['total_s'] / 60:.0f} min on a 2-core machine "
        f"(more under load; the model is in bench/run_all.py)"
    )


def machine(out: str) -> dict:
    m = machine_info()
    vm = psutil.virtual_memory()
    m["ram_available_bytes"] = vm.available
    m["disk_free_bytes"] = shutil.disk_usage(out).free
    m["loadavg_start"] = [round(x, 2) for x in os.getloadavg()]
    m["gpu"] = None
    if shutil.which("nvidia-smi"):
        try:
            names = subprocess.run(
                ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True, timeout=30
            ).stdout.split("\n")
            m["gpu"] = ", ".join(n.strip() for n in names if n.strip()) or None
        except (OSError, subprocess.SubprocessError):
            pass
    return m


def _other_loads(obj) -> list[float]:
    """Every run's ``other_load`` (cores used by other processes), wherever it sits in the sections."""
    if isinstance(obj, dict):
        own = [obj["other_load"]] if isinstance(obj.get("other_load"), (int, float)) else []
        return own + [x for k, v in obj.items() if k != "other_load" for x in _other_loads(v)]
    if isinstance(obj, list):
        return [x for v in obj for x in _other_loads(v)]
    return []


def write_reports(results: dict, out: str, publish: bool) -> None:
    loads = _other_loads(results.get("sections", {}))
    if loads:
        results["other_load_summary"] = {"mean": sum(loads) / len(loads), "max": max(loads), "runs": len(loads)}
    md = gathered.render_markdown(results, plot_name="report.svg")
    svg = gathered.render_svg(results)
    write_text(os.path.join(out, "report.md"), md)
    write_text(os.path.join(out, "report.svg"), svg)
    log(f"report: {os.path.join(out, 'report.md')}, chart: {os.path.join(out, 'report.svg')}")
    if publish:
        write_text(DOCS_REPORT, gathered.render_markdown(results, plot_name="img/benchmarks_gathered.svg"))
        write_text(DOCS_PLOT, svg)
        log(f"published: {os.path.relpath(DOCS_REPORT, REPO)}, {os.path.relpath(DOCS_PLOT, REPO)}")


def _save(results: dict, out: str, key: str | None = None) -> None:
    if key:
        write_json(os.path.join(out, f"{key}.json"), results["sections"][key], indent=1)
    write_json(os.path.join(out, "results.json"), results, indent=1)


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    if a.render:
        with open(a.render) as fh:
            results = json.load(fh)
        write_reports(results, os.path.dirname(os.path.abspath(a.render)), a.publish)
        return 0
    pl = plan(a)
    print_plan(pl)
    if a.estimate_only:
        return 0
    ts = time.strftime("%Y%m%d_%H%M%S")
    a.out = os.path.abspath(a.out or os.path.join(HERE, "results", ts))
    if a.nice:
        os.nice(a.nice)
    snapshot = run_bench.make_snapshot(a.out) if a.snapshot else None
    b = Bench(a)
    b.data_dir = os.path.abspath(a.data_dir)
    os.makedirs(b.data_dir, exist_ok=True)
    problem = _sections.check_disk(b, pl["corpus_sizes"])
    if problem:
        log(f"error: {problem}")
        return 2
    t0 = time.perf_counter()
    results: dict = {
        "timestamp": _dt.datetime.now().isoformat(timespec="seconds"),
        "argv": sys.argv[1:] if argv is None else argv,
        "machine": machine(a.out),
        "config": {
            k: getattr(a, k)
            for k in (
                "quick",
                "sizes",
                "ck_rows",
                "repeats",
                "partition_rows",
                "sweep_at",
                "ops_rows",
                "ops_repeats",
                "skip_dj",
                "seed",
                "quiet_wait",
                "nice",
                "sections",
            )
        },
        "estimate_s": pl["total_s"],
        "sections": {},
        "notes": [],
        "snapshot": snapshot,
    }
    m = results["machine"]
    log(
        f"machine: {m['nproc']} cores ({m['cpu_model']}), {m['ram_bytes'] / 2**30:.1f} GiB RAM, "
        f"load {m['loadavg_start']}; results in {a.out}"
    )

    warm = b.run_ours("warmup_1row", ensure_corpus(b.data_dir, 1, a.seed)[0], 1, "1")
    if warm["rc"] != 0:
        log(f"error: the warm-up run failed; see {warm['log_path']}")
        return 1

    failed: list[str] = []

    def done(key: str, data: dict) -> None:
        results["sections"][key] = data
        _save(results, a.out, key)
        print("\n" + gathered.section_md(key, data), flush=True)

    full = None
    if {"checkpoint", "resume"} & set(a.sections):
        ck_path, gen_s = ensure_corpus(b.data_dir, a.ck_rows, a.seed)
        if gen_s:
            log(f"generated {a.ck_rows:,}-row corpus in {gen_s:.0f}s")
    if "checkpoint" in a.sections:
        ck = _sections.checkpoint_sweep(b, ck_path, a.ck_rows, a.repeats, keep_every_op="resume" in a.sections)
        full = ck.pop("resume_from", None)
        done("checkpoint", ck)
        failed += [f"checkpoint {r['strategy']}" for r in ck["table"] if not r["ok"]]
    if "resume" in a.sections:
        rs = _sections.resume_cost(b, ck_path, a.ck_rows, full)
        done("resume", rs)
        c = rs.get("checks", {})
        if rs.get("error") or not c.get("kill_fired") or c.get("resume_after_kill_same_export") is not True:
            failed.append("resume")
    if "scale" in a.sections:
        sc = _sections.scale(b, a.sizes, a.partition_rows, a.sweep_at, (0.5, 1.0, 2.0))
        done("scale", sc)
        failed += [f"scale {r['rows']}" for r in sc["by_size"] + sc["by_partition_size"] if r.get("rc") != 0]
    if "ops" in a.sections:
        ensure_corpus(b.data_dir, a.ops_rows, a.seed)
        ops = _sections.per_op(b, a.ops_rows, a.skip_dj, a.ops_repeats, None if a.skip_dj else a.dj_python)
        done("ops", ops)
        if ops.get("error") or ops.get("rc"):
            failed.append("ops")
        if a.skip_dj:
            results["notes"].append("Data-Juicer was not run (--skip-dj or --quick): the per-op table has ours only.")

    results["total_s"] = time.perf_counter() - t0
    results["failed"] = failed
    if results["machine"]["loadavg_start"][0] > 0.5 * (m["nproc"] or 1):
        results["notes"].append(
            f"The machine was busy at the start (load average {m['loadavg_start'][0]:.1f} on "
            f"{m['nproc']} cores): the figures are noisy."
        )
    _save(results, a.out)
    write_reports(results, a.out, a.publish)
    log(
        f"took {results['total_s'] / 60:.1f} min (estimated {pl['total_s'] / 60:.0f} min); "
        + (f"FAILED: {', '.join(failed)}" if failed else "every section succeeded")
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
