"""The four measured sections of bench/run_all.py, each against a baseline taken in the same run.

Every measured command is a real ``dj-airflow run`` (Airflow 3 ``dag.test()``
+ in-process Ray) started through ``run_bench.Bench.run_ours``, so wall time,
CPU seconds and the peak RSS/PSS of the whole process tree (CLI, Ray's GCS and
raylet, workers) are taken the same way as in bench/run_bench.py
(``_measure.run_measured``).  A section returns a plain dict (it goes to
JSON as is); ``bench.report.gathered`` turns it into tables.

Why baselines in the same run: on a shared machine, load changes from minute
to minute, so a ratio against a figure from another day measures the other
users, not the code.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import time

import xxhash

from bench import _proc
from bench.run_bench import ensure_corpus, log

# Checkpoint strategies of the sweep, on the spine recipe (bench/_recipes.OPS:
# two mappers, two filters, then the global document_deduplicator).
STRATEGIES: dict[str, dict] = {
    "disabled": {"enabled": False},
    "every_op": {"enabled": True, "strategy": "every_op"},
    "every_n_ops": {"enabled": True, "strategy": "every_n_ops", "n_ops": 2},
    "manual": {"enabled": True, "strategy": "manual", "op_names": ["words_num_filter"]},
}
BASELINE = "disabled"
AIM_EVERY_OP_OVERHEAD = 0.10

# Where the mid-job kill lands: partition 1, right after op 2 (words_num_filter)
# is committed.  With the spine recipe's 4 partitions run two at a time this
# is about a third of the way into the partition work.
KILL_FAULT = {"point": "after_op", "partition_id": 1, "op_index": 2, "times": 1, "kind": "kill_run"}

# Peak PSS at the largest size over the same at the reference size, same
# partition size: "bounded by partition size" if it stays under this.
BOUNDED_RATIO = 1.5


def file_digest(path: str) -> str | None:
    """xxh3-128 of a file's bytes: equal exports are byte-identical (invariant 5)."""
    if not os.path.exists(path):
        return None
    h = xxhash.xxh3_128()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def _slim(res: dict) -> dict:
    """The figures of one run worth keeping in the section JSON."""
    keep = (
        "wall_s",
        "rc",
        "error",
        "error_line",
        "peak_tree_rss",
        "peak_tree_pss",
        "peak_nprocs",
        "cpu_tree_s",
        "foreign_cpu_s",
        "rows_in",
        "rows_out",
        "num_partitions",
        "job_id",
        "log_path",
        "recipe",
        "failed_attempts",
    )
    out = {k: res.get(k) for k in keep if k in res}
    bd = res.get("breakdown") or {}
    tasks = bd.get("tasks") or {}
    out["partition_tasks_s"] = round(sum(v["seconds"] for k, v in tasks.items() if k.startswith("partitions_seg")), 3)
    out["validate_s"] = (tasks.get("validate") or {}).get("seconds")
    out["export_s"] = (tasks.get("export") or {}).get("seconds")
    out["other_load"] = (res["foreign_cpu_s"] / res["wall_s"]) if res.get("wall_s") else None
    return out


def _finish_export(res: dict, keep: bool) -> str | None:
    """Digest of a run's export, then delete it (a 10M-row export is gigabytes) unless ``keep``."""
    path = res.get("export")
    digest = file_digest(path) if path and res.get("rc") == 0 else None
    if path and not keep and os.path.exists(path):
        os.remove(path)
    return digest


def _drop_job(res: dict) -> None:
    shutil.rmtree(res["job_dir"], ignore_errors=True)
    if os.path.exists(res["export"]):
        os.remove(res["export"])


def _same(digest: str | None, reference: str | None) -> bool | None:
    """Byte-identical exports?  None when there was nothing to compare (a failed run)."""
    return (digest == reference) if digest and reference else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return (a / b - 1.0) if a is not None and b else None


# ------------------------------------------------------------------ (1) checkpoint strategies


def checkpoint_sweep(b, dataset: str, n: int, repeats: int, keep_every_op: bool) -> dict:
    """Each strategy ``repeats`` times, round-robin (drift hits all alike); best wall per strategy.

    ``keep_every_op``: keep the job directory of the fastest every_op run so the
    resume section can resume it (its ``resume_from`` entry).
    """
    runs: dict[str, list[dict]] = {s: [] for s in STRATEGIES}
    full: dict | None = None
    for rep in range(repeats):
        for name, ck in STRATEGIES.items():
            keep = keep_every_op and name == "every_op"
            res = b.run_ours(f"ck_{name}_{n}_r{rep + 1}", dataset, n, "4", extra={"checkpoint": ck}, keep_work=keep)
            res["export_digest"] = _finish_export(res, keep=keep)
            runs[name].append(_slim(res) | {"export_digest": res["export_digest"]})
            if not keep:
                continue
            # Keep only the fastest good every_op job (for the resume section); drop the other.
            if res.get("rc") == 0 and (full is None or res["wall_s"] < full["wall_s"]):
                full, res = res, full
            if res is not None:
                _drop_job(res)
    best = {
        name: min((r for r in rs if r.get("rc") == 0), key=lambda r: r["wall_s"], default=None)
        for name, rs in runs.items()
    }
    base = best.get(BASELINE)
    table = []
    for name in STRATEGIES:
        r = best[name]
        row = {"strategy": name, "checkpoint": STRATEGIES[name], "ok": r is not None}
        if r:
            row |= {
                k: r.get(k)
                for k in (
                    "wall_s",
                    "cpu_tree_s",
                    "partition_tasks_s",
                    "peak_tree_pss",
                    "peak_tree_rss",
                    "rows_out",
                    "export_digest",
                    "other_load",
                )
            }
            row["overhead_wall"] = _ratio(r["wall_s"], base and base["wall_s"])
            row["overhead_cpu"] = _ratio(r["cpu_tree_s"], base and base["cpu_tree_s"])
            row["overhead_partition_tasks"] = _ratio(r["partition_tasks_s"], base and base["partition_tasks_s"])
            row["same_export_as_baseline"] = (r["export_digest"] == base["export_digest"]) if base else None
        table.append(row)
    every_op = next(r for r in table if r["strategy"] == "every_op")
    ov = every_op.get("overhead_wall")
    out = {
        "rows": n,
        "repeats": repeats,
        "baseline": BASELINE,
        "table": table,
        "runs": runs,
        "aim": {
            "what": f"every_op wall overhead vs disabled <= {AIM_EVERY_OP_OVERHEAD:.0%}",
            "value": ov,
            "pass": None if ov is None else ov <= AIM_EVERY_OP_OVERHEAD,
        },
    }
    if full is not None:
        out["resume_from"] = {
            k: full[k] for k in ("job_id", "recipe", "export", "job_dir", "wall_s", "export_digest", "rows_in")
        } | {"run": _slim(full)}
    return out


# ------------------------------------------------------------------ (2) resume cost


def _resume_events(job_dir: str, since: float) -> dict:
    """What a resume did, from the job's event log: validation steps, reloaded checkpoints, redone op units."""
    from airflow_provider_dj.engine.jobdir.events import read_events

    evs = read_events(job_dir, since=since)
    count = lambda t: sum(1 for e in evs if e.get("event_type") == t)  # noqa: E731
    return {
        "validation_steps": count("validation_step"),
        "checkpoints_loaded": count("checkpoint_load"),
        "partitions_resumed": count("partition_resume"),
        "op_units_redone": count("op_complete"),
        "checkpoints_written": count("checkpoint_save"),
    }


def _resume_row(label: str, res: dict, full_wall: float, events: dict | None) -> dict:
    r = _slim(res)
    return {
        "case": label,
        **{
            k: r.get(k)
            for k in (
                "wall_s",
                "validate_s",
                "partition_tasks_s",
                "rc",
                "error",
                "cpu_tree_s",
                "peak_tree_pss",
                "other_load",
            )
        },
        "share_of_full": (r["wall_s"] / full_wall) if r.get("wall_s") and full_wall else None,
        "validate_share_of_full": (r["validate_s"] / full_wall) if r.get("validate_s") and full_wall else None,
        "events": events,
    }


def resume_cost(b, dataset: str, n: int, full: dict | None) -> dict:
    """Full run (the sweep's every_op job, or a new one), resume of it complete, then kill + resume.

    The killed run gets ``KILL_FAULT`` (SIGKILL to the CLI, Ray and its
    workers) through a fault file put in its job directory before it starts.
    """
    if full is None:
        res = b.run_ours(f"resume_full_{n}", dataset, n, "4", keep_work=True)
        full = res | {"export_digest": _finish_export(res, keep=True)}
        if res.get("rc") != 0:
            return {"rows": n, "error": f"full run failed: {res.get('error')}; log {res.get('log_path')}"}
    full_wall = full["wall_s"]
    rows = [
        {
            "case": "full run (every_op)",
            "wall_s": full_wall,
            "share_of_full": 1.0,
            "validate_s": (full.get("run") or _slim(full)).get("validate_s"),
            "rc": 0,
        }
    ]

    t0 = time.time()
    done = b.run_ours(f"resume_done_{n}", dataset, n, "4", resume=full, infra_retries=0, keep_work=True)
    rows.append(_resume_row("resume of the completed job", done, full_wall, _resume_events(full["job_dir"], t0)))
    done_digest = _finish_export(done, keep=False)

    kill_id = f"bench_resume_kill_{n}_{b.ts}"
    job_dir = os.path.join(b.work, kill_id)
    os.makedirs(job_dir, exist_ok=True)
    with open(os.path.join(job_dir, "_fault_injection.json"), "w") as fh:
        json.dump([KILL_FAULT], fh)
    killed = b.run_ours(f"resume_kill_{n}", dataset, n, "4", job_id=kill_id, infra_retries=0, keep_work=True)
    fired = (
        os.listdir(os.path.join(job_dir, "_fault_injection.fired"))
        if os.path.isdir(os.path.join(job_dir, "_fault_injection.fired"))
        else []
    )
    row = _resume_row("run killed mid-job (SIGKILL, whole tree)", killed, full_wall, None)
    row["fault"] = KILL_FAULT
    row["fault_fired"] = bool(fired)
    rows.append(row)
    t0 = time.time()
    resumed = b.run_ours(f"resume_after_kill_{n}", dataset, n, "4", resume=killed, infra_retries=0, keep_work=True)
    rows.append(_resume_row("resume after the kill", resumed, full_wall, _resume_events(job_dir, t0)))
    resumed_digest = _finish_export(resumed, keep=False)
    if not b.args.keep_work:
        _drop_job(full)
        shutil.rmtree(job_dir, ignore_errors=True)

    lost = None
    if killed.get("wall_s") and resumed.get("rc") == 0:
        lost = (killed["wall_s"] + resumed["wall_s"]) / full_wall - 1.0
    return {
        "rows": n,
        "full_wall_s": full_wall,
        "table": rows,
        "crash_overhead": lost,  # (killed + resumed) / full - 1: what the crash cost in all
        "checks": {
            "kill_fired": bool(fired),
            "killed_rc": killed.get("rc"),
            "resume_of_completed_same_export": _same(done_digest, full.get("export_digest")),
            "resume_after_kill_same_export": _same(resumed_digest, full.get("export_digest")),
        },
    }


# ------------------------------------------------------------------ (3) scale and memory


def _scale_run(b, tag: str, dataset: str, n: int, part_rows: int) -> dict:
    res = b.run_ours(tag, dataset, n, "4", extra={"partition": {"mode": "manual", "size": part_rows}})
    _finish_export(res, keep=False)
    r = _slim(res)
    return {
        "rows": n,
        "partition_rows": part_rows,
        "input_bytes": os.path.getsize(dataset),
        **{
            k: r.get(k)
            for k in (
                "wall_s",
                "cpu_tree_s",
                "peak_tree_rss",
                "peak_tree_pss",
                "num_partitions",
                "rows_out",
                "rc",
                "error",
                "other_load",
                "partition_tasks_s",
            )
        },
        "rows_per_s": (n / r["wall_s"]) if r.get("wall_s") and r.get("rc") == 0 else None,
    }


def scale(b, sizes: list[int], part_rows: int, sweep_at: int, sweep_factors: tuple[float, ...]) -> dict:
    """Wall and peak memory per input size at a fixed partition size, then per partition size at one input size."""
    by_size = []
    for n in sizes:
        path, gen_s = ensure_corpus(b.data_dir, n, b.args.seed)
        if gen_s:
            log(f"generated {n}-row corpus in {gen_s:.0f}s ({os.path.getsize(path) / 1e9:.2f} GB)")
        by_size.append(_scale_run(b, f"scale_{n}_p{part_rows}", path, n, part_rows))
    by_part = []
    sweep_path, _ = ensure_corpus(b.data_dir, sweep_at, b.args.seed)
    for f in sweep_factors:
        p = max(1, int(part_rows * f))
        same = next((r for r in by_size if r["rows"] == sweep_at and r["partition_rows"] == p), None)
        by_part.append(same or _scale_run(b, f"scale_{sweep_at}_p{p}", sweep_path, sweep_at, p))
    ok = [r for r in by_size if r.get("rc") == 0 and r.get("peak_tree_pss")]
    bounded = None
    if len(ok) >= 2:
        top = ok[-1]
        # The reference is the sweep size (1M by default) unless that is the largest size itself.
        ref = next((r for r in ok[:-1] if r["rows"] == sweep_at), ok[-2])
        ratio = top["peak_tree_pss"] / ref["peak_tree_pss"]
        bounded = {
            "largest_rows": top["rows"],
            "reference_rows": ref["rows"],
            "pss_ratio": ratio,
            "input_ratio": top["rows"] / ref["rows"],
            "limit": BOUNDED_RATIO,
            "pass": ratio <= BOUNDED_RATIO,
        }
    return {
        "partition_rows": part_rows,
        "by_size": by_size,
        "sweep_at_rows": sweep_at,
        "by_partition_size": by_part,
        "bounded": bounded,
    }


# ------------------------------------------------------------------ (4) per-op throughput


def benchmarkable_ops() -> list[str]:
    """Registry ops that run_ops_bench.py has arguments for (its OP_ARGS).

    The registry also holds model and API ops (llm_api_mapper needs a model
    and an endpoint, text_embedding_mapper a model): they have no
    Data-Juicer counterpart to race and cannot run offline with defaults.
    """
    from airflow_provider_dj.ops.registry import op_names
    from bench.ops.run_ops_bench import OP_ARGS

    return [n for n in op_names() if n in OP_ARGS]


def per_op(b, rows: int, skip_dj: bool, repeats: int, dj_python: str | None) -> dict:
    """``python -m bench.ops.run_ops_bench`` in a subprocess (it runs Data-Juicer in its own venv); its JSON is returned."""
    out = os.path.join(b.out, "ops")
    os.makedirs(out, exist_ok=True)
    link = os.path.join(out, "data")  # share the corpus cache instead of a second copy
    if not os.path.exists(link):
        os.symlink(b.data_dir, link)
    from airflow_provider_dj.ops.registry import op_names

    ops = benchmarkable_ops()
    cmd = _proc.module_cmd("bench.ops.run_ops_bench", "--rows", rows, "--out", out, "--repeats", repeats, "--ops", *ops)
    if skip_dj:
        cmd.append("--skip-dj")
    if dj_python:
        cmd += ["--dj-python", dj_python]
    log_path = os.path.join(b.logs, "ops_bench.log")
    log(f"per-op: {' '.join(cmd[1:])} (log {log_path}) ...")
    before = set(glob.glob(os.path.join(out, "ops_*.json")))
    with open(log_path, "w") as fh:
        rc = subprocess.run(
            cmd, stdout=fh, stderr=subprocess.STDOUT, cwd=b.scratch, env=_proc.child_env(), timeout=3 * 3600
        ).returncode
    new = sorted(set(glob.glob(os.path.join(out, "ops_*.json"))) - before)
    if not new:
        return {"error": f"run_ops_bench.py wrote no JSON (exit {rc}); see {log_path}", "log": log_path}
    with open(new[-1]) as fh:
        res = json.load(fh)
    res["rc"] = rc
    res["not_benchmarked"] = sorted(set(op_names()) - set(ops))
    res["json"] = new[-1]
    res["log"] = log_path
    return res


def check_disk(b, sizes: list[int], bytes_per_row: float = 660.0, factor: float = 4.0) -> str | None:
    """Refuse (with a message) before any work when the disk cannot hold the largest run.

    A run needs its corpus (cached), its Parquet checkpoints (every_op keeps
    five, roughly 2x the JSONL in all) and its JSONL export (about 0.9x):
    ``factor`` x the corpus is a safe bound.  660 bytes per row is what
    sample_corpus writes (659,639,462 bytes for 1M rows).
    """
    missing = sum(n for n in sizes if not os.path.exists(os.path.join(b.data_dir, f"corpus_{n}_s{b.args.seed}.jsonl")))
    need = missing * bytes_per_row + factor * max(sizes) * bytes_per_row
    free = shutil.disk_usage(b.out).free
    if free < need:
        return (
            f"not enough disk under {b.out}: about {need / 1e9:.1f} GB needed for sizes {sizes} "
            f"(corpora not yet in {b.data_dir} plus {factor:g}x the largest for checkpoints and export), "
            f"{free / 1e9:.1f} GB free; free some space, pass --out/--data-dir on a larger disk, or drop the "
            f"largest of --sizes"
        )
    return None
