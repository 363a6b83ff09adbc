"""MinHash near-dedup against Data-Juicer: ``dj-airflow run`` of a one-op recipe against Data-Juicer
1.6.1's ``document_minhash_deduplicator`` (its default executor) and its ``ray_bts_minhash_deduplicator``
(its Ray executor), on the same input, in the same bench run.

The op: 256 permutations, ``jaccard_threshold: 0.7``, every other argument at its default (``space``
tokenization, 5-word shingles, lowercase, bands and rows from the optimal-parameter search).  The input:
``--sizes`` corpora of 40-word texts over a 20,000-word vocabulary, each row ``{"id": i, "text": ...}``;
about 20% of the rows copy a uniformly chosen earlier row with one or two words changed (a copy of a copy
chains rows into clusters).  One word changed leaves a Jaccard similarity of the 5-word shingles of about
0.76, two of about 0.57-0.76 (adjacent or not): above and around the threshold, so the LSH's
probabilities matter and two implementations need not keep the same rows.

Each run is a fresh process tree (start-up included), measured by ``bench._measure.run_measured``: wall
seconds, CPU seconds of the whole tree (Ray's daemons and workers, Data-Juicer's forked workers), rows/s,
rows/s per core (each side is given the machine's cores: ``--num-cpus`` for ours, ``np`` and Ray's CPUs for
Data-Juicer), the rows kept and whether the kept ``id`` set equals ours.  Printed: one table, and the
ratios ours vs each Data-Juicer op; written: ``bench/results/minhash_vs_dj/minhash_vs_dj.json``.

    .venv/bin/python -m bench minhash-vs-dj                        # 30k, 100k and 300k rows
    .venv/bin/python -m bench minhash-vs-dj --sizes 30000 --skip-dj  # ours only, quick
    .venv/bin/python -m bench minhash-vs-dj --sizes 300000 1000000 --skip-dj-default  # ours and BTS, larger

Data-Juicer runs in a side virtualenv (``bench.run_bench.default_dj_venv``: ``$DJ_VENV``, else
``bench/.djvenv``, created with ``py-data-juicer==1.6.1`` when missing; its Ray executor also needs
``ray[data]`` there, installed on first use).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

from bench import _measure
from bench._proc import RESULTS_DIR
from bench.report import md_table, write_json, write_text

OP_ARGS = {"num_permutations": 256, "jaccard_threshold": 0.7}
OURS, DJ_DEFAULT, DJ_BTS = "ours", "dj_default", "dj_ray_bts"
LABELS = {
    OURS: "ours (dj-airflow run)",
    DJ_DEFAULT: "DJ document_minhash_deduplicator (default executor)",
    DJ_BTS: "DJ ray_bts_minhash_deduplicator (Ray executor)",
}


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --- the input ----------------------------------------------------------------------------------------
def near_dup_corpus(path: str, rows: int, seed: int = 1, dup_share: float = 0.2) -> dict:
    """Write ``rows`` JSONL rows ``{"id", "text"}``: 40 words from a 20,000-word vocabulary; about
    ``dup_share`` of them copy a uniformly chosen earlier row with one or two words (half each) replaced.
    Returns the counts it made."""
    import numpy as np

    rng = np.random.default_rng(seed)
    vocab = np.array([f"w{i}" for i in range(20_000)])
    words = rng.integers(0, len(vocab), size=(rows, 40)).astype(np.int16)  # the same draws, a quarter the memory
    dup = rng.random(rows) < dup_share
    dup[0] = False
    src = (rng.random(rows) * np.arange(rows)).astype(np.int64)
    n_changed = np.where(rng.random(rows) < 0.5, 1, 2)
    pos = rng.integers(0, 40, size=(rows, 2))
    fresh = rng.integers(0, len(vocab), size=(rows, 2))
    for i in np.flatnonzero(dup).tolist():
        words[i] = words[src[i]]
        for k in range(int(n_changed[i])):
            words[i, pos[i, k]] = fresh[i, k]
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as fh:
        step = 200_000  # rows turned into strings at a time: 10M rows' words at once would be ~25 GB
        for s in range(0, rows, step):
            chunk = vocab[words[s : s + step]].tolist()
            fh.write("".join('{"id":%d,"text":"%s"}\n' % (s + j, " ".join(row)) for j, row in enumerate(chunk)))
    return {"rows": rows, "near_copies": int(dup.sum()), "two_words_changed": int((dup & (n_changed == 2)).sum())}


# --- reading an export --------------------------------------------------------------------------------
def kept_ids(export: str) -> list[int]:
    """The ``id`` of every exported row: a JSONL file, or a directory of JSON/JSONL/Parquet files (Ray's
    writers)."""
    if os.path.isdir(export):
        files = sorted(p for p in glob.glob(os.path.join(export, "**", "*"), recursive=True) if os.path.isfile(p))
    else:
        files = [export] if os.path.exists(export) else []
    ids: list[int] = []
    for f in files:
        if f.endswith(".parquet"):
            import pyarrow.parquet as pq

            ids.extend(pq.read_table(f, columns=["id"]).column("id").to_pylist())
        elif f.endswith((".json", ".jsonl")):
            with open(f, encoding="utf-8") as fh:
                ids.extend(json.loads(line)["id"] for line in fh if line.strip())
    return ids


# --- the three runs ---------------------------------------------------------------------------------
def _env(scratch: str) -> dict:
    from bench.run_bench import base_env

    env = base_env()  # private RAY_TMPDIR, no RAY_ADDRESS, offline
    hf = os.path.join(scratch, "hf")
    env.update(
        {
            "HF_HOME": hf,
            "HF_DATASETS_CACHE": os.path.join(hf, "datasets"),
            "DATA_JUICER_CACHE_HOME": os.path.join(hf, "data_juicer"),
            "XDG_CACHE_HOME": os.path.join(hf, "xdg"),
            "DJ_AIRFLOW_HOME": os.path.join(scratch, "airflow_home"),
            "AIRFLOW_HOME": os.path.join(scratch, "airflow_home"),
        }
    )
    return env


def _write_yaml(path: str, data: dict) -> str:
    import yaml

    with open(path, "w") as fh:
        yaml.safe_dump(data, fh, sort_keys=False)
    return path


def _measured(kind: str, cmd: list[str], env: dict, scratch: str, export: str, rows: int, timeout: float) -> dict:
    log_path = os.path.join(scratch, f"{kind}.log")
    os.sync()  # the previous run's writeback is not this run's cost
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = _measure.run_measured(cmd, env=env, log_path=log_path, timeout_s=timeout, cwd=scratch)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    # The sampler misses a process's last interval; the reaped tree's rusage misses processes not waited
    # for (a daemon that outlived it): the larger of the two is the closer figure.
    reaped = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    res = {
        "kind": kind,
        "rows_in": rows,
        "rc": r.rc,
        "error": r.error,
        "wall_s": r.wall_s,
        "cpu_tree_s": max(r.cpu_tree_s, reaped),
        "cpu_sampled_s": r.cpu_tree_s,
        "cpu_reaped_s": reaped,
        "foreign_cpu_s": r.foreign_cpu_s,
        "peak_tree_rss": r.peak_tree_rss,
        "peak_nprocs": r.peak_nprocs,
    }
    if r.rc == 0:
        ids = kept_ids(export)
        res["kept"] = len(ids)
        res["_ids"] = ids
    else:
        res["log_tail"] = _measure.tail(log_path, 30)
    return res


def run_ours(data: str, rows: int, scratch: str, cores: int, timeout: float) -> dict:
    export = os.path.join(scratch, "ours_export.jsonl")
    recipe = _write_yaml(
        os.path.join(scratch, "ours.yaml"),
        {
            "project_name": "minhash_vs_dj",
            "dataset_path": data,
            "export_path": export,
            "work_dir": os.path.join(scratch, "ours_work"),
            "process": [{"document_minhash_deduplicator": dict(OP_ARGS)}],
        },
    )
    dj = os.path.join(os.path.dirname(sys.executable), "dj-airflow")
    cmd = [dj, "run", recipe, "--job-id", "minhash", "--num-cpus", str(cores), "--no-progress"]
    res = _measured(OURS, cmd, _env(scratch), scratch, export, rows, timeout)
    if res["rc"] == 0:
        with open(os.path.join(scratch, f"{OURS}.log"), encoding="utf-8", errors="replace") as fh:
            text = fh.read()
        chose = [ln.split("executor: ", 1)[1].strip() for ln in text.splitlines() if "executor: " in ln]
        res["executor_line"] = chose[0] if chose else None
        res["executor"] = _executor_word(res["executor_line"])
    res["cores"] = cores
    return res


def _executor_word(line: str | None) -> str | None:
    """Where ``dj-airflow run --executor auto`` ran the partitions, from its ``executor:`` log line."""
    if not line:
        return None
    if "in this process" in line:
        return "in-process, no Ray"
    if "pool" in line:
        return "local pool, no Ray"
    return "Ray" if "Ray" in line else line


def run_dj(kind: str, dj_exe: str, data: str, rows: int, scratch: str, cores: int, timeout: float) -> dict:
    """Data-Juicer's ``dj-process`` with its default executor and ``document_minhash_deduplicator``, or
    with its Ray executor (a local Ray of ``cores`` CPUs) and ``ray_bts_minhash_deduplicator``."""
    work = os.path.join(scratch, f"{kind}_work")
    cfg = {
        "project_name": f"minhash_vs_dj_{kind}",
        "dataset_path": data,
        "work_dir": work,
        "text_keys": "text",
        "np": cores,
        "use_cache": False,
        "open_tracer": False,
    }
    if kind == DJ_DEFAULT:
        export = os.path.join(scratch, f"{kind}_export.jsonl")
        cfg.update(executor_type="default", export_path=export)
        cfg["process"] = [{"document_minhash_deduplicator": dict(OP_ARGS)}]
    else:
        # ray_address "local": a new local Ray of the machine's CPUs (the default "auto" joins a running
        # cluster).  The Ray executor writes its export as a directory of JSON files named export_path.
        export = os.path.join(scratch, f"{kind}_export.jsonl")
        cfg.update(executor_type="ray", ray_address="local", export_path=export)
        cfg["process"] = [{"ray_bts_minhash_deduplicator": dict(OP_ARGS)}]
    recipe = _write_yaml(os.path.join(scratch, f"{kind}.yaml"), cfg)
    res = _measured(kind, [dj_exe, "--config", recipe], _env(scratch), scratch, export, rows, timeout)
    res["cores"] = cores
    shutil.rmtree(work, ignore_errors=True)
    return res


def ensure_dj(skip: bool) -> str | None:
    """``dj-process`` of the side virtualenv with Ray in it; None when skipped or not available."""
    if skip:
        return None
    from bench.run_bench import default_dj_venv, ensure_dj_venv

    venv = default_dj_venv()
    exe = ensure_dj_venv(venv)
    if exe is None:
        return None
    py = os.path.join(venv, "bin", "python")
    if subprocess.run([py, "-c", "import ray.data"], capture_output=True).returncode != 0:
        log(f"installing ray[data] into {venv} (Data-Juicer's Ray executor needs it) ...")
        subprocess.run([os.path.join(venv, "bin", "pip"), "install", "-q", "ray[data]"], check=True, timeout=3600)
    return exe


# --- the report ---------------------------------------------------------------------------------------
def _row(r: dict, ours: dict | None) -> list[str]:
    ok = r["rc"] == 0
    rate = r["rows_in"] / r["wall_s"] if ok else None
    busy = r["cpu_tree_s"] / r["wall_s"] if r["wall_s"] else 0.0
    same = "-"
    if ok and ours is not None and ours["rc"] == 0:
        same = "yes" if set(r["_ids"]) == set(ours["_ids"]) else f"no ({_diff(r['_ids'], ours['_ids'])})"
    if r["kind"] == OURS:
        same = "(ours)"
    label = LABELS[r["kind"]] + (f" [{r['executor']}]" if r.get("executor") else "")
    return [
        f"{r['rows_in']:,}",
        label,
        f"{r['wall_s']:.1f}" if ok else f"FAILED ({r['error']})",
        f"{r['cpu_tree_s']:.1f}",
        f"{r['cores']} ({busy:.2f} busy)",
        f"{rate:,.0f}" if rate else "-",
        f"{rate / r['cores']:,.0f}" if rate else "-",
        f"{r['rows_in'] / r['cpu_tree_s']:,.0f}" if ok and r["cpu_tree_s"] else "-",
        f"{r['kept']:,}" if ok else "-",
        same,
    ]


def _diff(a: list[int], b: list[int]) -> str:
    sa, sb = set(a), set(b)
    return f"{len(sa - sb)} only here, {len(sb - sa)} only ours"


HEADER = [
    "rows",
    "run",
    "wall s",
    "CPU s (tree)",
    "cores given (avg busy)",
    "rows/s",
    "rows/s per core",
    "rows per CPU-second",
    "rows kept",
    "kept ids = ours",
]


def ratios(results: list[dict]) -> list[list[str]]:
    """Per size: ours' rows/s per core over each Data-Juicer run's, and the same with CPU seconds."""
    out = []
    for size in sorted({r["rows_in"] for r in results}):
        ours = next((r for r in results if r["rows_in"] == size and r["kind"] == OURS and r["rc"] == 0), None)
        if ours is None:
            continue
        for kind in (DJ_DEFAULT, DJ_BTS):
            dj = next((r for r in results if r["rows_in"] == size and r["kind"] == kind and r["rc"] == 0), None)
            if dj is None:
                continue
            per_core = (size / ours["wall_s"] / ours["cores"]) / (size / dj["wall_s"] / dj["cores"])
            per_cpu_s = dj["cpu_tree_s"] / ours["cpu_tree_s"] if ours["cpu_tree_s"] else float("nan")
            out.append([f"{size:,}", LABELS[kind], f"{per_core:.2f}x", f"{per_cpu_s:.2f}x"])
    return out


RATIO_HEADER = ["rows", "ours against", "rows/s per core", "rows per CPU-second"]


def marginal(results: list[dict]) -> list[list[str]]:
    """Per run kind, between each pair of consecutive sizes: the extra rows over the extra wall and CPU
    seconds (the fixed start-up, Data-Juicer's large, cancels out), and ours over it."""
    by_kind: dict[str, list[dict]] = {}
    for r in results:
        if r["rc"] == 0:
            by_kind.setdefault(r["kind"], []).append(r)
    rates: dict[tuple[str, int, int], tuple[float, float]] = {}
    for kind, runs in by_kind.items():
        runs.sort(key=lambda r: r["rows_in"])
        for a, b in zip(runs, runs[1:]):
            dn, dt, dc = b["rows_in"] - a["rows_in"], b["wall_s"] - a["wall_s"], b["cpu_tree_s"] - a["cpu_tree_s"]
            if dt > 0 and dc > 0:
                rates[(kind, a["rows_in"], b["rows_in"])] = (dn / dt / b["cores"], dn / dc)
    out = []
    for (kind, n1, n2), (per_core, per_cpu) in sorted(rates.items(), key=lambda x: (x[0][1], x[0][0])):
        ours = rates.get((OURS, n1, n2))
        vs = "-" if ours is None or kind == OURS else f"{ours[0] / per_core:.2f}x / {ours[1] / per_cpu:.2f}x"
        out.append([f"{n1:,} -> {n2:,}", LABELS[kind], f"{per_core:,.0f}", f"{per_cpu:,.0f}", vs])
    return out


MARGINAL_HEADER = [
    "sizes",
    "run",
    "marginal rows/s per core",
    "marginal rows per CPU-second",
    "ours / this (per core / per CPU-second)",
]


def report(results: list[dict], out: str) -> None:
    rows = []
    for r in results:
        ours = next((x for x in results if x["rows_in"] == r["rows_in"] and x["kind"] == OURS), None)
        rows.append(_row(r, ours))
    table = md_table(HEADER, rows)
    ratio_table = md_table(RATIO_HEADER, ratios(results))
    marginal_table = md_table(MARGINAL_HEADER, marginal(results))
    print(table, ratio_table, marginal_table, sep="\n\n")
    write_text(os.path.join(out, "minhash_vs_dj.md"), "\n\n".join([table, ratio_table, marginal_table]) + "\n")


def code_state() -> dict:
    """The commit measured and the provider files modified in the working tree when it ran."""
    from bench.run_bench import REPO, git_info

    status = subprocess.run(
        ["git", "status", "--porcelain", "--", "airflow_provider_dj"], cwd=REPO, capture_output=True, text=True
    ).stdout
    return {**git_info(), "provider_files_modified": [ln[3:] for ln in status.splitlines() if ln.strip()]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[30_000, 100_000, 300_000], help="input rows")
    ap.add_argument("--skip-dj", action="store_true", help="ours only (no Data-Juicer virtualenv needed)")
    ap.add_argument(
        "--skip-dj-default", action="store_true", help="ours and the BTS op only (the default executor is the slowest)"
    )
    ap.add_argument("--cores", type=int, default=os.cpu_count() or 2, help="cores each run is given")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds one run may take")
    ap.add_argument("--keep", action="store_true", help="keep the scratch directory (printed)")
    ap.add_argument("--out", default=os.path.join(RESULTS_DIR, "minhash_vs_dj"))
    args = ap.parse_args(argv)
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    dj_exe = ensure_dj(args.skip_dj)
    if not args.skip_dj and dj_exe is None:
        log("Data-Juicer is not available: measuring ours only")
    kinds = [OURS] + (([DJ_BTS] if args.skip_dj_default else [DJ_DEFAULT, DJ_BTS]) if dj_exe else [])
    results: list[dict] = []
    corpora: list[dict] = []
    for size in args.sizes:
        scratch = tempfile.mkdtemp(prefix=f"dj-bench-minhash-{size}-")
        try:
            data = os.path.join(scratch, "in.jsonl")
            corpora.append(near_dup_corpus(data, size))
            for kind in kinds:
                sub = os.path.join(scratch, kind)
                os.makedirs(sub)
                log(f"{size:,} rows: {LABELS[kind]} ...")
                if kind == OURS:
                    r = run_ours(data, size, sub, args.cores, args.timeout)
                else:
                    r = run_dj(kind, dj_exe, data, size, sub, args.cores, args.timeout)
                results.append(r)
                log(
                    f"  rc={r['rc']} {r['wall_s']:.1f} s wall, {r['cpu_tree_s']:.1f} CPU s, kept {r.get('kept')}"
                    + (f"\n{r['log_tail']}" if r["rc"] != 0 else "")
                )
                write_json(
                    os.path.join(out, "minhash_vs_dj.json"),
                    {"code": code_state(), "corpora": corpora, "results": [_public(x) for x in results]},
                )
        finally:
            if args.keep:
                log(f"kept {scratch}")
            else:
                shutil.rmtree(scratch, ignore_errors=True)
    for r in results:  # the comparison, stored without the id lists
        ours = next((x for x in results if x["rows_in"] == r["rows_in"] and x["kind"] == OURS), None)
        if r["rc"] == 0 and ours is not None and ours["rc"] == 0 and r is not ours:
            r["kept_equal_ours"] = r["_ids"] == ours["_ids"]
            r["kept_set_equal_ours"] = set(r["_ids"]) == set(ours["_ids"])
    write_json(
        os.path.join(out, "minhash_vs_dj.json"),
        {"code": code_state(), "corpora": corpora, "results": [_public(x) for x in results]},
    )
    report(results, out)
    return 0 if all(r["rc"] == 0 for r in results) else 1


def _public(r: dict) -> dict:
    return {k: v for k, v in r.items() if not k.startswith("_")}


if __name__ == "__main__":
    raise SystemExit(main())
