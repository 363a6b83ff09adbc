"""The peak memory of every process of a ``dj-airflow run`` job at 10M and 30M rows, by kind of process.

One exact deduplicator (``document_deduplicator``, default arguments) over N short rows
``{"id": i, "text": "<four random words>"}``, about 20% of them exact copies of a uniformly chosen
earlier row, through ``dj-airflow run`` (a new process each time; ``--airflow`` runs the generated DAG
through ``dag.test()`` instead of the engine's local executor), with ``checkpoint: {strategy: disabled}``
(only the state before the global op and the export are written) and everything else at its default:
automatic partitions, the executor it chooses (Ray above ``[dj] local_work_max_rows``), and the global
step's settings (``global_step_shards: 0``, ``global_shard_memory_mb`` 1024: at 10M rows the step runs in
one process, at 30M in key shards, at about 78 bytes a row).  One more run at ``--sharded-rows`` with
``DJ_GLOBAL_SHARD_MEMORY_MB=--sharded-budget-mb`` makes the planner shard a size it would not.

Every ``--interval`` seconds (0.2) psutil reads the RSS of every process in the run's tree: the CLI
process (which runs the job's steps, as the Airflow tasks do, and drives Ray), Ray's ``gcs_server`` and
``raylet``, Ray's workers (``ray::...``/``default_worker.py``), a local pool's processes, and the rest
(Ray's dashboard and agents).  Per run it reports the CLI's peak, the largest Ray worker's peak (and the
task it was running), the tree's largest summed RSS, wall seconds, rows exported (checked against the
distinct texts the generator made), and the job directory's size.  The CLI's RSS is kept as a timeline
beside the run's log lines, so the step that holds the CLI's memory at its peak is named (the last log
line before it).  Written: ``bench/results/memory_at_scale/memory_at_scale.json`` and ``.md``.

    .venv/bin/python -m bench memory-at-scale                           # 10M, 30M, and 10M sharded
    .venv/bin/python -m bench memory-at-scale --rows 1000000 --sharded-rows 1000000 --sharded-budget-mb 300
    .venv/bin/python -m bench memory-at-scale --op minhash --rows 10000000 --sharded-rows ''  # MinHash

Corpora and job directories go under ``--tmp`` (``/tmp``) and are deleted after each run (``--keep``
keeps them); check ``df -h /tmp`` first: 30M rows take about 1.4 GB of input plus the job directory.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import psutil

from bench._proc import RESULTS_DIR
from bench.report import md_table, write_json, write_text

RECIPE = """\
project_name: memory_at_scale
dataset_path: {data}
export_path: {export}
work_dir: {work}
checkpoint: {{strategy: disabled}}
process:
{process}"""

#: ``--op``: the recipe's one op.  ``minhash`` is the near-dedup of bench/minhash_vs_dj.py (256
#: permutations, Jaccard 0.7) over that bench's 40-word rows; its kept rows are not known in advance.
OPS = {
    "exact": "  - document_deduplicator:\n",
    "minhash": "  - document_minhash_deduplicator: {num_permutations: 256, jaccard_threshold: 0.7}\n",
}

MiB = 2**20
CLI, RAY_WORKER, RAYLET, GCS, POOL, OTHER = "cli", "ray_worker", "raylet", "gcs_server", "pool_worker", "other"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --- the input ----------------------------------------------------------------------------------------
def short_corpus(path: str, rows: int, seed: int = 1, dup_share: float = 0.2) -> dict:
    """``rows`` JSONL rows ``{"id", "text"}``; each text is four words that spell a number (a bijection of
    its text number), so two rows have equal texts exactly when they copy the same text.  About ``dup_share``
    of the rows copy the text of a uniformly chosen earlier row.  Returns the rows and the distinct texts,
    which is the number of rows an exact deduplicator keeps."""
    import numpy as np

    rng = np.random.default_rng(seed)
    text_no = np.arange(rows, dtype=np.int64)
    dup = rng.random(rows) < dup_share
    dup[0] = False
    src = (rng.random(rows) * np.arange(rows)).astype(np.int64)
    for i in np.flatnonzero(dup).tolist():  # in input order: a source that is itself a copy is resolved
        text_no[i] = text_no[src[i]]
    # A bijection of [0, 200^4): a multiplier prime to 200^4 = 2^12 * 5^8 scrambles the words.
    space = 200**4
    scrambled = (text_no * 2_654_435_761 + 12_345) % space
    vocab = np.array([w + str(i) for i, w in enumerate(["ka", "lo", "mi", "nu"] * 50)])
    digits = [(scrambled // 200**k) % 200 for k in range(4)]
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as fh:
        step = 1_000_000
        for s in range(0, rows, step):
            e = min(rows, s + step)
            words = [vocab[d[s:e]].tolist() for d in digits]
            fh.write(
                "".join(
                    '{"id":%d,"text":"%s %s %s %s"}\n' % (s + j, a, b, c, d)
                    for j, (a, b, c, d) in enumerate(zip(*words))
                )
            )
    distinct = int(rows - dup.sum())
    return {"rows": rows, "distinct_texts": distinct, "bytes": os.path.getsize(path)}


def _corpus(op: str, path: str, rows: int) -> dict:
    """The input for ``op``: short rows with known distinct texts, or MinHash's near-duplicate rows."""
    if op == "exact":
        return short_corpus(path, rows)
    from bench.minhash_vs_dj import near_dup_corpus

    made = near_dup_corpus(path, rows)
    return {**made, "distinct_texts": None, "bytes": os.path.getsize(path)}


# --- the sampler ----------------------------------------------------------------------------------------
def _kind(p: psutil.Process, root: int) -> tuple[str, str]:
    """(kind, name) of a process in the run's tree."""
    if p.pid == root:
        return CLI, "dj-airflow run"
    name = p.name()
    if name.startswith("ray::"):
        return RAY_WORKER, name
    if name == "raylet":
        return RAYLET, name
    if name == "gcs_server":
        return GCS, name
    try:
        cmd = " ".join(p.cmdline())
    except psutil.Error:
        cmd = ""
    if "default_worker.py" in cmd:
        return RAY_WORKER, name
    if "multiprocessing" in cmd or "concurrent" in cmd:
        return POOL, name
    return OTHER, name


class Sampler(threading.Thread):
    """RSS of every process under ``root`` every ``interval`` s: per process its peak, per sample the sum,
    and the CLI's RSS as a timeline."""

    def __init__(self, root: int, interval: float, t0: float) -> None:
        super().__init__(daemon=True)
        self.root, self.interval, self.t0 = root, interval, t0
        self.stop = threading.Event()
        self.procs: dict[int, dict] = {}
        self.peak_sum = 0
        self.peak_sum_at = 0.0
        self.peak_sum_by_kind: dict[str, int] = {}
        #: per sample: (epoch seconds, CLI RSS, largest worker RSS, the tree's sum)
        self.timeline: list[tuple[float, int, int, int]] = []
        self.samples = 0

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                rootp = psutil.Process(self.root)
                tree = [rootp] + rootp.children(recursive=True)
            except psutil.Error:
                tree = []
            now = time.perf_counter() - self.t0
            total, by_kind, cli_rss, worker_rss = 0, {}, 0, 0
            for p in tree:
                try:
                    rss = p.memory_info().rss
                    kind, name = _kind(p, self.root)
                except psutil.Error:
                    continue
                total += rss
                by_kind[kind] = by_kind.get(kind, 0) + rss
                rec = self.procs.setdefault(p.pid, {"pid": p.pid, "kind": kind, "peak_rss": 0, "names": []})
                if name not in rec["names"]:
                    rec["names"].append(name)
                if rss > rec["peak_rss"]:
                    rec.update(peak_rss=rss, peak_at_s=round(now, 2), name_at_peak=name)
                if kind == CLI:
                    cli_rss = rss
                elif kind in (RAY_WORKER, POOL):
                    worker_rss = max(worker_rss, rss)
            if tree:
                self.timeline.append((time.time(), cli_rss, worker_rss, total))
                self.samples += 1
                if total > self.peak_sum:
                    self.peak_sum, self.peak_sum_at, self.peak_sum_by_kind = total, now, by_kind
            self.stop.wait(self.interval)


#: (phase, the event that starts it): a phase lasts until the next phase's event
PHASE_EVENTS = [
    ("start-up and planning", None),
    ("partitions before the global op", "partition_start"),
    ("global step", "global_op_start"),
    ("partitions after the global op", "global_op_complete"),
    ("export", "export_start"),
    ("after the export", "export_complete"),
]


def _events(job_dir: str) -> dict[str, list[float]]:
    """Event type -> the epoch timestamps of its events, from the job directory's event logs."""
    import glob
    import json

    out: dict[str, list[float]] = {}
    for path in glob.glob(os.path.join(job_dir, "events_*.jsonl")):
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                try:
                    ev = json.loads(line)
                except ValueError:
                    continue
                if isinstance(ev.get("timestamp"), (int, float)):
                    out.setdefault(ev.get("event_type", ""), []).append(float(ev["timestamp"]))
    return out


def shard_info(job_dir: str) -> dict | None:
    """The global step's ``global_op_shards`` event (key shards, node shards, stage times); None: one process."""
    import glob
    import json

    for path in glob.glob(os.path.join(job_dir, "events_*.jsonl")):
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                if '"global_op_shards"' in line:
                    ev = json.loads(line)
                    return {k: ev.get(k) for k in ("key_shards", "node_shards", "durations", "edges")}
    return None


def phase_peaks(timeline: list[tuple[float, int, int, int]], events: dict[str, list[float]]) -> list[dict]:
    """Per phase of the job (from its events): its start (s after the run began), the CLI's, the largest
    worker's and the tree's peak RSS within it."""
    if not timeline:
        return []
    t_start = timeline[0][0]
    starts = []
    for name, ev in PHASE_EVENTS:
        if ev is None:
            starts.append((name, t_start))
        elif events.get(ev):
            # the first partition of the job, the first global op, the first export
            starts.append((name, min(events[ev]) if ev != "global_op_complete" else max(events[ev])))
    starts.sort(key=lambda x: x[1])
    out = []
    for i, (name, t0) in enumerate(starts):
        t1 = starts[i + 1][1] if i + 1 < len(starts) else float("inf")
        inside = [s for s in timeline if t0 <= s[0] < t1]
        out.append(
            {
                "phase": name,
                "start_s": round(t0 - t_start, 2),
                "seconds": round((min(t1, timeline[-1][0]) - t0), 2),
                "cli_peak_rss": max((s[1] for s in inside), default=None),
                "worker_peak_rss": max((s[2] for s in inside), default=None),
                "sum_peak_rss": max((s[3] for s in inside), default=None),
            }
        )
    return out


def _dir_size(path: str) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_size
            except OSError:
                pass
    return total


def _count_lines(path: str) -> int:
    n = 0
    with open(path, "rb") as fh:
        while chunk := fh.read(16 * MiB):
            n += chunk.count(b"\n")
    return n


# --- one run --------------------------------------------------------------------------------------------
def run_one(
    label: str,
    data: str,
    corpus: dict,
    tmp: str,
    *,
    budget_mb: int | None,
    interval: float,
    airflow: bool,
    op: str = "exact",
) -> dict:
    from bench.run_bench import base_env

    work = os.path.join(tmp, f"work_{label}")
    export = os.path.join(tmp, f"export_{label}.jsonl")
    recipe = os.path.join(tmp, f"{label}.yaml")
    with open(recipe, "w") as fh:
        fh.write(RECIPE.format(data=data, export=export, work=work, process=OPS[op]))
    env = base_env()  # a private RAY_TMPDIR, no RAY_ADDRESS, offline
    env["DJ_AIRFLOW_HOME"] = env["AIRFLOW_HOME"] = os.path.join(tmp, "airflow_home")
    for k in ("DJ_GLOBAL_SHARD_MEMORY_MB", "DJ_GLOBAL_STEP_SHARDS"):
        env.pop(k, None)
    if budget_mb is not None:
        env["DJ_GLOBAL_SHARD_MEMORY_MB"] = str(budget_mb)
    dj = os.path.join(os.path.dirname(sys.executable), "dj-airflow")
    cmd = [dj, "run", recipe, "--job-id", "job", "--no-progress"] + (["--airflow"] if airflow else [])
    log_path = os.path.join(tmp, f"{label}.log")
    lines: list[tuple[float, str]] = []
    os.sync()
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=tmp, text=True, errors="replace"
    )
    sampler = Sampler(proc.pid, interval, t0)
    sampler.start()
    with open(log_path, "w") as logf:
        for line in proc.stdout:
            lines.append((round(time.perf_counter() - t0, 2), line.rstrip("\n")))
            logf.write(line)
    rc = proc.wait()
    wall = time.perf_counter() - t0
    sampler.stop.set()
    sampler.join(timeout=5)
    procs = list(sampler.procs.values())
    cli = next((p for p in procs if p["kind"] == CLI), {"peak_rss": 0, "peak_at_s": 0.0})
    workers = [p for p in procs if p["kind"] in (RAY_WORKER, POOL)]
    biggest = max(workers, key=lambda p: p["peak_rss"]) if workers else None
    step_at_cli_peak = next((text for t, text in reversed(lines) if t <= cli.get("peak_at_s", 0.0)), None)
    job_dir = os.path.join(work, "job")
    phases = phase_peaks(sampler.timeline, _events(job_dir))
    cli_phase = max(phases, key=lambda p: p["cli_peak_rss"] or 0)["phase"] if phases else None
    exported = _count_lines(export) if rc == 0 and os.path.exists(export) else None
    chose = next((ln.split("executor: ", 1)[1].strip() for _t, ln in lines if "executor: " in ln), None)
    res = {
        "label": label,
        "rows": corpus["rows"],
        "budget_mb": budget_mb,
        "airflow": airflow,
        "rc": rc,
        "wall_s": wall,
        "executor": chose,
        "rows_exported": exported,
        "op": op,
        "rows_expected": corpus["distinct_texts"],
        "export_ok": None if corpus["distinct_texts"] is None else exported == corpus["distinct_texts"],
        "job_dir_bytes": _dir_size(job_dir) if os.path.isdir(job_dir) else None,
        "export_bytes": os.path.getsize(export) if os.path.exists(export) else None,
        "cli_peak_rss": cli["peak_rss"],
        "cli_peak_at_s": cli.get("peak_at_s"),
        "cli_step_at_peak": step_at_cli_peak,
        "cli_phase_at_peak": cli_phase,
        "global_shards": shard_info(job_dir),
        "phases": phases,
        "largest_worker_peak_rss": biggest["peak_rss"] if biggest else None,
        "largest_worker_task": biggest.get("name_at_peak") if biggest else None,
        "largest_worker_kind": biggest["kind"] if biggest else None,
        "peak_sum_rss": sampler.peak_sum,
        "peak_sum_at_s": round(sampler.peak_sum_at, 2),
        "peak_sum_by_kind": sampler.peak_sum_by_kind,
        "peak_by_kind": _peak_by_kind(procs),
        "processes": len(procs),
        "samples": sampler.samples,
        "global_step": _global_step_lines(lines),
        "timeline": sampler.timeline[:: max(1, len(sampler.timeline) // 400)],
        "log_lines": [(t, text) for t, text in lines if text.strip()][-300:],
    }
    if rc != 0:
        res["log_tail"] = "\n".join(text for _t, text in lines[-40:])
    return res


def _peak_by_kind(procs: list[dict]) -> dict:
    out: dict[str, dict] = {}
    for p in procs:
        k = out.setdefault(p["kind"], {"processes": 0, "largest_peak_rss": 0})
        k["processes"] += 1
        k["largest_peak_rss"] = max(k["largest_peak_rss"], p["peak_rss"])
    return out


def _global_step_lines(lines: list[tuple[float, str]]) -> list[str]:
    keys = ("shard", "global", "dedup")
    return [f"{t:.1f}s {text}" for t, text in lines if any(k in text.lower() for k in keys)][:20]


# --- the report -------------------------------------------------------------------------------------
HEADER = [
    "rows",
    "global step budget",
    "exit",
    "wall s",
    "CLI peak MiB (phase)",
    "largest Ray worker peak MiB (task)",
    "sum at peak MiB",
    "raylet / gcs peak MiB",
    "rows exported (expected)",
    "job dir MiB",
]


def _mib(n: int | None) -> str:
    return "-" if n is None else f"{n / MiB:,.0f}"


def table_rows(results: list[dict]) -> list[list[str]]:
    rows = []
    for r in results:
        kinds = r["peak_by_kind"]
        step = r["cli_phase_at_peak"] or (r["cli_step_at_peak"] or "").strip()[:60]
        rows.append(
            [
                f"{r['rows']:,}",
                ("default (1024 MiB)" if r["budget_mb"] is None else f"{r['budget_mb']} MiB")
                + (f", K={r['global_shards']['key_shards']}" if r.get("global_shards") else ", one process"),
                str(r["rc"]),
                f"{r['wall_s']:.1f}",
                f"{_mib(r['cli_peak_rss'])} ({step})",
                f"{_mib(r['largest_worker_peak_rss'])} ({r['largest_worker_task']})",
                _mib(r["peak_sum_rss"]),
                f"{_mib(kinds.get(RAYLET, {}).get('largest_peak_rss'))} / {_mib(kinds.get(GCS, {}).get('largest_peak_rss'))}",
                f"{r['rows_exported'] if r['rows_exported'] is None else format(r['rows_exported'], ',')} "
                f"({_expected(r)})",
                _mib(r["job_dir_bytes"]),
            ]
        )
    return rows


def _expected(r: dict) -> str:
    if r["rows_expected"] is None:
        return "not known in advance"
    return f"{r['rows_expected']:,}{'' if r['export_ok'] else ', MISMATCH'}"


PHASE_HEADER = ["rows", "budget", "phase", "starts at s", "seconds", "CLI peak MiB", "largest worker MiB", "sum MiB"]


def phase_rows(results: list[dict]) -> list[list[str]]:
    rows = []
    for r in results:
        for p in r["phases"]:
            rows.append(
                [
                    f"{r['rows']:,}",
                    "default" if r["budget_mb"] is None else f"{r['budget_mb']} MiB",
                    p["phase"],
                    f"{p['start_s']:.1f}",
                    f"{p['seconds']:.1f}",
                    _mib(p["cli_peak_rss"]),
                    _mib(p["worker_peak_rss"]),
                    _mib(p["sum_peak_rss"]),
                ]
            )
    return rows


def _sizes(text: str) -> list[int]:
    return [int(float(x)) for x in text.split(",") if x.strip()]


def code_state() -> dict:
    """The commit measured and the provider files modified in the working tree when it ran."""
    from bench.run_bench import REPO, git_info

    status = subprocess.run(
        ["git", "status", "--porcelain", "--", "airflow_provider_dj"], cwd=REPO, capture_output=True, text=True
    ).stdout
    return {**git_info(), "provider_files_modified": [ln[3:] for ln in status.splitlines() if ln.strip()]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", default="10000000,30000000", help="sizes at the default budget, comma-separated")
    ap.add_argument("--sharded-rows", default="10000000", help="sizes run again with --sharded-budget-mb ('' none)")
    ap.add_argument(
        "--sharded-budget-mb", type=int, default=384, help="DJ_GLOBAL_SHARD_MEMORY_MB of those runs (128 MiB of data)"
    )
    ap.add_argument("--interval", type=float, default=0.2, help="seconds between RSS samples")
    ap.add_argument("--op", choices=sorted(OPS), default="exact", help="the recipe's one deduplicator")
    ap.add_argument("--airflow", action="store_true", help="run through dag.test() (dj-airflow run --airflow)")
    ap.add_argument("--tmp", default="/tmp", help="where the corpora and job directories go")
    ap.add_argument("--keep", action="store_true", help="keep corpora and job directories (printed)")
    ap.add_argument("--out", default=os.path.join(RESULTS_DIR, "memory_at_scale"))
    args = ap.parse_args(argv)
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    plan: list[tuple[int, int | None]] = []
    for n in _sizes(args.rows):
        plan.append((n, None))
        if n in _sizes(args.sharded_rows):  # the sharded run right after its size's default run: one corpus
            plan.append((n, args.sharded_budget_mb))
    plan += [(n, args.sharded_budget_mb) for n in _sizes(args.sharded_rows) if n not in _sizes(args.rows)]
    log(f"free in {args.tmp}: {shutil.disk_usage(args.tmp).free / 2**30:.1f} GiB; plan: {plan}")
    results: list[dict] = []
    tmp = tempfile.mkdtemp(prefix="dj-bench-mem-", dir=args.tmp)
    corpus, data = None, os.path.join(tmp, "in.jsonl")
    try:
        for n, budget in plan:
            if corpus is None or corpus["rows"] != n:
                t0 = time.perf_counter()
                corpus = _corpus(args.op, data, n)
                log(
                    f"{n:,} rows: corpus {corpus['bytes'] / 2**30:.2f} GiB in {time.perf_counter() - t0:.0f} s, "
                    f"{corpus['distinct_texts'] or 'unknown'} distinct texts"
                )
            label = f"{n}_{budget or 'default'}"
            log(f"{n:,} rows, budget {budget or 'default'}: dj-airflow run ...")
            r = run_one(
                label, data, corpus, tmp, budget_mb=budget, interval=args.interval, airflow=args.airflow, op=args.op
            )
            r["corpus_bytes"] = corpus["bytes"]
            results.append(r)
            log(
                f"  rc={r['rc']} {r['wall_s']:.1f} s, CLI peak {_mib(r['cli_peak_rss'])} MiB, largest worker "
                f"{_mib(r['largest_worker_peak_rss'])} MiB ({r['largest_worker_task']}), sum {_mib(r['peak_sum_rss'])} "
                f"MiB, exported {r['rows_exported']} (expected {r['rows_expected']}), job dir "
                f"{_mib(r['job_dir_bytes'])} MiB" + (f"\n{r['log_tail']}" if r["rc"] != 0 else "")
            )
            write_json(os.path.join(out, "memory_at_scale.json"), {"code": code_state(), "results": results})
            if not args.keep:  # the next run starts from an empty job directory and disk
                shutil.rmtree(os.path.join(tmp, f"work_{label}"), ignore_errors=True)
                for f in (f"export_{label}.jsonl",):
                    if os.path.exists(os.path.join(tmp, f)):
                        os.remove(os.path.join(tmp, f))
    finally:
        if args.keep:
            log(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    table = md_table(HEADER, table_rows(results)) + "\n\n" + md_table(PHASE_HEADER, phase_rows(results))
    print(table)
    write_text(os.path.join(out, "memory_at_scale.md"), table + "\n")
    write_json(os.path.join(out, "memory_at_scale.json"), {"code": code_state(), "results": results})
    return 0 if all(r["rc"] == 0 and r["export_ok"] is not False for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
