#!/usr/bin/env python
"""End-to-end benchmark: dj-airflow (Airflow 3 + Ray, partitioned, checkpointed)
vs. Data-Juicer 1.6.1's default executor, on the same synthetic corpus.

Run with the project's virtualenv (it imports airflow_provider_dj):

    .venv/bin/python bench/run_bench.py                      # 200k and 1M rows
    .venv/bin/python bench/run_bench.py --sizes 100000 200000 1000000
    .venv/bin/python bench/run_bench.py --quick              # 20k and 100k rows
    .venv/bin/python bench/run_bench.py --quick --skip-dj    # ours only

See bench/README.md for what each figure means.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import glob
import json
import os
import platform
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)

try:
    import psutil  # noqa: F401
    import yaml  # noqa: F401

    from airflow_provider_dj.sample_corpus import write_corpus
except ImportError as _exc:  # pragma: no cover - wrong interpreter
    sys.exit(f"error: {_exc}. Run this script with the project's virtualenv: {REPO}/.venv/bin/python bench/run_bench.py")

import _compare  # noqa: E402
import _logparse  # noqa: E402
import _measure  # noqa: E402
import _recipes  # noqa: E402
import _report  # noqa: E402

DJ_VERSION = "1.6.1"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ---------------------------------------------------------------- setup


def machine_info() -> dict:
    import psutil

    cpu_model = None
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    cpu_model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count()
    versions = {"python": platform.python_version()}
    from importlib import metadata

    for pkg in ("apache-airflow", "ray", "pyarrow", "xxhash", "airflow-provider-dj"):
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            pass
    return {
        "hostname": platform.node(),
        "platform": platform.platform(),
        "cpu_model": cpu_model,
        "nproc": usable,
        "cpu_count_logical": os.cpu_count(),
        "ram_bytes": psutil.virtual_memory().total,
        "versions": versions,
        "gnu_time": _measure.has_gnu_time(),
    }


def default_dj_venv() -> str:
    env = os.environ.get("DJ_VENV")
    if env:
        return env
    if os.path.exists("/work/djvenv/bin/dj-process"):
        return "/work/djvenv"
    return os.path.join(HERE, ".djvenv")


def ensure_dj_venv(venv: str) -> str | None:
    """Return the dj-process path, creating the venv if needed; None (with a message) on failure."""
    exe = os.path.join(venv, "bin", "dj-process")
    if os.path.exists(exe):
        return exe
    log(f"Data-Juicer venv not found at {venv}; creating it (python3 -m venv + pip install "
        f"py-data-juicer=={DJ_VERSION} aiohttp) ...")
    try:
        subprocess.run(["python3", "-m", "venv", venv], check=True, timeout=300)
        subprocess.run([os.path.join(venv, "bin", "pip"), "install", "-q", f"py-data-juicer=={DJ_VERSION}", "aiohttp"],
                       check=True, timeout=3600)
    except (subprocess.SubprocessError, OSError) as exc:
        log(f"error: could not create the Data-Juicer venv: {exc}; use --skip-dj or DJ_VENV=/path/to/venv")
        return None
    return exe if os.path.exists(exe) else None


def dj_version(venv: str) -> str | None:
    try:
        out = subprocess.run([os.path.join(venv, "bin", "python"), "-c",
                              "import importlib.metadata as m; print(m.version('py-data-juicer'))"],
                             capture_output=True, text=True, timeout=60)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def corpus_path(data_dir: str, n: int, seed: int) -> str:
    return os.path.join(data_dir, f"corpus_{n}_s{seed}.jsonl")


def ensure_corpus(data_dir: str, n: int, seed: int) -> tuple[str, float | None]:
    path = corpus_path(data_dir, n, seed)
    if n == 0:
        os.makedirs(data_dir, exist_ok=True)
        open(path, "w").close()
        return path, None
    if os.path.exists(path):
        return path, None
    t0 = time.perf_counter()
    write_corpus(path, n, seed)
    return path, time.perf_counter() - t0


# ---------------------------------------------------------------- runs


def base_env() -> dict:
    env = dict(os.environ)
    env.update({
        "PYTHONUNBUFFERED": "1",
        "RAY_USAGE_STATS_ENABLED": "0",
        "HF_DATASETS_OFFLINE": "1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "DO_NOT_TRACK": "1",
        "TOKENIZERS_PARALLELISM": "false",
    })
    return env


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.out = os.path.abspath(args.out)
        self.ts = time.strftime("%Y%m%d_%H%M%S")
        self.data_dir = os.path.join(self.out, "data")
        self.logs = os.path.join(self.out, "logs", self.ts)
        self.recipes = os.path.join(self.out, "recipes", self.ts)
        self.exports = os.path.join(self.out, "exports", self.ts)
        self.work = os.path.join(self.out, "work")
        self.scratch = os.path.join(self.out, "scratch")
        self.airflow_home = os.path.join(self.out, "airflow_home")
        for d in (self.data_dir, self.logs, self.recipes, self.exports, self.work, self.scratch, self.airflow_home):
            os.makedirs(d, exist_ok=True)
        self.dj_airflow = self._find_dj_airflow()
        self.counter = 0

    @staticmethod
    def _find_dj_airflow() -> list[str]:
        exe = os.path.join(os.path.dirname(sys.executable), "dj-airflow")
        if os.path.exists(exe):
            return [exe]
        return [sys.executable, "-m", "airflow_provider_dj.cli"]

    def _timeout(self, n: int, base: float, per_row: float) -> float:
        return (base + per_row * n) * self.args.timeout_scale

    # -- ours
    def run_ours(self, tag: str, dataset: str, n: int, partitions: str) -> dict:
        self.counter += 1
        job_id = f"bench_{tag}_{self.ts}_{self.counter}"
        name = f"bench_{tag}"
        export = os.path.join(self.exports, f"ours_{tag}.jsonl")
        recipe = _recipes.write_yaml(os.path.join(self.recipes, f"ours_{tag}.yaml"), _recipes.ours_recipe(
            name=name, dataset_path=dataset, export_path=export, work_dir=self.work, partitions=partitions))
        env = base_env()
        env["DJ_AIRFLOW_HOME"] = self.airflow_home
        env["AIRFLOW_HOME"] = self.airflow_home
        cmd = self.dj_airflow + ["run", recipe, "--job-id", job_id]
        log_path = os.path.join(self.logs, f"ours_{tag}.log")
        timeout = self._timeout(n, 300, 0.002)
        log(f"ours  {tag:>9}: dj-airflow run ({n} rows, partitions={partitions}, timeout {timeout:.0f}s) ...")
        started = time.time()
        r = _measure.run_measured(cmd, env=env, log_path=log_path, timeout_s=timeout, cwd=REPO)
        ended = time.time()
        res = r.to_dict()
        res.update({"rows_in": n, "recipe": recipe, "export": export, "job_id": job_id, "partitions": partitions,
                    "breakdown": _logparse.parse_ours_log(log_path, started, ended)})
        job_dir = os.path.join(self.work, job_id)
        summary = os.path.join(job_dir, "job_summary.json")
        if os.path.exists(summary):
            with open(summary) as fh:
                js = json.load(fh)
            shutil.copy(summary, os.path.join(self.logs, f"ours_{tag}.job_summary.json"))
            res["rows_out"] = js.get("export", {}).get("rows")
            res["num_partitions"] = js.get("input", {}).get("partitions")
        if r.rc != 0:
            res["error_line"] = _logparse.last_error_line(log_path)
            log(f"      FAILED ({r.error}); {res.get('error_line') or ''}\n      log: {log_path}")
        else:
            log(f"      {r.wall_s:7.1f} s wall, peak tree RSS {_report.gib(r.peak_tree_rss)}, "
                f"PSS {_report.gib(r.peak_tree_pss)}, rows out {res.get('rows_out')}")
        if not self.args.keep_work and os.path.isdir(job_dir):
            shutil.rmtree(job_dir, ignore_errors=True)
        return res

    # -- Data-Juicer
    def run_dj(self, tag: str, dataset: str, n: int, dj_exe: str) -> dict:
        export = os.path.join(self.exports, f"dj_{tag}.jsonl")
        work = os.path.join(self.scratch, f"dj_work_{tag}")
        hf = os.path.join(self.scratch, f"hf_{tag}")
        for d in (work, hf):
            shutil.rmtree(d, ignore_errors=True)
        recipe = _recipes.write_yaml(os.path.join(self.recipes, f"dj_{tag}.yaml"), _recipes.dj_recipe(
            name=f"bench_dj_{tag}", dataset_path=dataset, export_path=export, work_dir=work, np_=self.args.dj_np))
        env = base_env()
        env.update({
            "HF_HOME": hf,
            "HF_DATASETS_CACHE": os.path.join(hf, "datasets"),
            "HUGGINGFACE_HUB_CACHE": os.path.join(hf, "hub"),
            "DATA_JUICER_CACHE_HOME": os.path.join(hf, "data_juicer"),
            "XDG_CACHE_HOME": os.path.join(hf, "xdg"),
        })
        cmd = [dj_exe, "--config", recipe]
        log_path = os.path.join(self.logs, f"dj_{tag}.log")
        timeout = self._timeout(n, 600, 0.006)
        log(f"DJ    {tag:>9}: dj-process ({n} rows, np={self.args.dj_np}, timeout {timeout:.0f}s) ...")
        r = _measure.run_measured(cmd, env=env, log_path=log_path, timeout_s=timeout, cwd=self.scratch)
        res = r.to_dict()
        res.update({"rows_in": n, "recipe": recipe, "export": export, "breakdown": _logparse.parse_dj_log(log_path)})
        if os.path.exists(export):
            with open(export, "rb") as fh:
                res["rows_out"] = sum(1 for line in fh if line.strip())
        if r.rc != 0:
            res["error_line"] = _logparse.last_error_line(log_path)
            log(f"      FAILED ({r.error}); {res.get('error_line') or ''}\n      log: {log_path}")
        else:
            log(f"      {r.wall_s:7.1f} s wall, peak tree RSS {_report.gib(r.peak_tree_rss)}, "
                f"PSS {_report.gib(r.peak_tree_pss)}, rows out {res.get('rows_out')}")
        if not self.args.keep_work:
            for d in (work, hf):
                shutil.rmtree(d, ignore_errors=True)
        return res

    # -- parse time
    def run_parse(self, dataset: str) -> dict:
        out_json = os.path.join(self.logs, "parse_bench.json")
        env = base_env()
        env["DJ_AIRFLOW_HOME"] = self.airflow_home
        env["AIRFLOW_HOME"] = self.airflow_home
        log_path = os.path.join(self.logs, "parse_bench.log")
        log(f"parse: {self.args.parse_recipes} recipes via register_recipe_dags (fresh interpreter) ...")
        with open(log_path, "w") as fh:
            try:
                p = subprocess.run([sys.executable, os.path.join(HERE, "_parsebench.py"), out_json, dataset,
                                    str(self.args.parse_recipes)], stdout=fh, stderr=subprocess.STDOUT, env=env,
                                   timeout=600, cwd=REPO)
                rc = p.returncode
            except subprocess.TimeoutExpired:
                rc = None
        if not os.path.exists(out_json):
            return {"error": f"parse bench failed (rc={rc}); see {log_path}", "log": log_path}
        with open(out_json) as fh:
            res = json.load(fh)
        res["rc"] = rc
        res["log"] = log_path
        return res


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="Results: <out>/bench_<timestamp>.json (+ .md, + .png when matplotlib is available)")
    p.add_argument("--sizes", type=int, nargs="+", default=[200_000, 1_000_000], help="corpus sizes in rows")
    p.add_argument("--quick", action="store_true", help="sizes 20000 and 100000 (overrides --sizes)")
    p.add_argument("--skip-dj", action="store_true", help="do not run Data-Juicer")
    p.add_argument("--dj-max-rows", type=int, default=1_000_000, help="skip Data-Juicer above this many rows")
    p.add_argument("--dj-venv", default=default_dj_venv(),
                   help="virtualenv with py-data-juicer (default: $DJ_VENV, /work/djvenv, else bench/.djvenv, created)")
    p.add_argument("--dj-np", type=int, default=2, help="Data-Juicer np (worker processes)")
    p.add_argument("--partitions", default="4", help="our partition count (manual) or 'auto' (default: 4)")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--out", default=os.path.join(HERE, "results"), help="results directory")
    p.add_argument("--timeout-scale", type=float, default=1.0, help="multiply every subprocess timeout")
    p.add_argument("--parse-recipes", type=int, default=50)
    p.add_argument("--hash-repeats", type=int, default=3)
    p.add_argument("--skip-hash", action="store_true")
    p.add_argument("--skip-parse", action="store_true")
    p.add_argument("--skip-startup", action="store_true", help="skip the 1-row / 0-row start-up runs")
    p.add_argument("--keep-work", action="store_true", help="keep job directories (checkpoints) after each run")
    args = p.parse_args(argv)
    if args.quick:
        args.sizes = [20_000, 100_000]
    args.sizes = sorted(set(args.sizes))
    if any(n < 1 for n in args.sizes):
        p.error("--sizes must be positive")
    if args.partitions != "auto" and not args.partitions.isdigit():
        p.error("--partitions takes a number or 'auto'")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    b = Bench(args)
    t_start = time.perf_counter()
    results: dict = {
        "timestamp": _dt.datetime.now().isoformat(timespec="seconds"),
        "argv": sys.argv[1:] if argv is None else argv,
        "machine": machine_info(),
        "config": {
            "sizes": args.sizes, "partitions": args.partitions, "seed": args.seed, "dj_np": args.dj_np,
            "dj_max_rows": args.dj_max_rows, "ops": _recipes.OPS, "memory_poll_s": 0.25,
        },
        "notes": [],
    }
    m = results["machine"]
    log(f"machine: {m['nproc']} CPUs ({m['cpu_model']}), {m['ram_bytes'] / 2**30:.1f} GiB RAM; results in {b.out}")

    # DJ availability
    dj_exe = None
    if not args.skip_dj:
        dj_exe = ensure_dj_venv(args.dj_venv)
        if dj_exe:
            results["machine"]["versions"]["py-data-juicer"] = dj_version(args.dj_venv)
        else:
            results["notes"].append("Data-Juicer runs skipped: no usable dj-process")
    else:
        results["notes"].append("Data-Juicer runs skipped (--skip-dj)")

    # Corpora
    corpora = {}
    for n in [0, 1] + args.sizes:
        path, gen_s = ensure_corpus(b.data_dir, n, args.seed)
        corpora[n] = path
        if gen_s is not None:
            log(f"generated {n}-row corpus in {gen_s:.1f}s: {path}")
    results["corpora"] = {str(n): {"path": p, "bytes": os.path.getsize(p)} for n, p in corpora.items()}

    # Warm-up: pays the one-time `airflow db migrate` (and the OS page cache for the code).
    migrated_before = bool(glob.glob(os.path.join(b.airflow_home, ".dj_db_migrated_*")))
    warm = b.run_ours("warmup_1row", corpora[1], 1, "1")
    results["warmup"] = {"wall_s": warm["wall_s"], "rc": warm["rc"], "db_migrated_in_this_run": not migrated_before,
                         "log": warm["log_path"]}
    if warm["rc"] != 0:
        log("error: the warm-up run failed; fix that first (see its log). Stopping.")
        _report.finish(b, results, t_start)
        return 1

    # Fixed start-up cost
    startup: dict = {}
    if not args.skip_startup:
        startup["ours_1row"] = b.run_ours("1row", corpora[1], 1, "1")
        startup["ours_0row"] = b.run_ours("0row", corpora[0], 0, "1")
        if dj_exe:
            startup["dj_1row"] = b.run_dj("1row", corpora[1], 1, dj_exe)
            startup["dj_0row"] = b.run_dj("0row", corpora[0], 0, dj_exe)
            if startup["ours_1row"]["rc"] == 0 and startup["dj_1row"]["rc"] == 0:
                startup["check_1row"] = _compare.compare_exports(startup["ours_1row"]["export"],
                                                                 startup["dj_1row"]["export"])
    results["startup"] = startup

    # Main runs
    runs: dict = {}
    for n in args.sizes:
        entry: dict = {}
        entry["ours"] = b.run_ours(str(n), corpora[n], n, args.partitions)
        if dj_exe:
            if n > args.dj_max_rows:
                entry["dj_skipped"] = f"{n} rows > --dj-max-rows {args.dj_max_rows}"
                log(f"DJ    {n:>9}: skipped ({entry['dj_skipped']})")
            else:
                entry["dj"] = b.run_dj(str(n), corpora[n], n, dj_exe)
            if "dj" in entry and entry["ours"]["rc"] == 0 and entry["dj"]["rc"] == 0:
                entry["check"] = _compare.compare_exports(entry["ours"]["export"], entry["dj"]["export"])
                print(_compare.format_compare(n, entry["check"]), flush=True)
        runs[str(n)] = entry
    results["runs"] = runs

    # Hash throughput (in this process, on the largest corpus)
    if not args.skip_hash:
        import _hashbench
        from airflow_provider_dj.engine.recipe import load_recipe

        largest = max(args.sizes)
        rpath = os.path.join(b.recipes, f"ours_{largest}.yaml")
        log(f"hash: kernels on the {largest}-row corpus ({os.path.getsize(corpora[largest]) / 1e6:.0f} MB) ...")
        try:
            pcfg = load_recipe(rpath).partition
            results["hash"] = _hashbench.run_hash_bench(corpora[largest], pcfg, repeats=args.hash_repeats)
        except Exception as exc:  # noqa: BLE001 - report, keep the other figures
            results["hash"] = {"error": f"{type(exc).__name__}: {exc}"}
            log(f"      hash bench failed: {exc}")

    # DAG parse time
    if not args.skip_parse:
        results["parse"] = b.run_parse(corpora[1])

    return _report.finish(b, results, t_start)


if __name__ == "__main__":
    sys.exit(main())
