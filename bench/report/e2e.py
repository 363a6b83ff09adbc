"""The end-to-end run's report (``python -m bench e2e``): summary figures, the printed table, its files and chart.

``summarize`` and ``render_table`` are pure functions of the results dict,
so ``-m bench e2e --render JSON`` re-prints an old run with this code;
``finish`` writes ``bench_<ts>.json``, ``.txt`` and ``.svg`` through
``bench.report``.
"""

from __future__ import annotations

import os
import time

from bench.report import chart, gib, write_json, write_text

# The lead's bars.
BAR_MARGINAL_RATIO = 10.0  # our marginal rows/s >= 10x Data-Juicer's
BAR_E2E_SIZE = 100_000
BAR_E2E_RATIO = 0.2  # our wall <= 0.2x Data-Juicer's at 100k rows
BAR_STARTUP_S = 10.0  # 1-row run
BAR_HASH_MB_S = 1000.0  # 1 GB/s (10**9 B/s) per core


def _ok(run: dict | None) -> bool:
    return bool(run) and run.get("rc") == 0


def _fmt(x: float | None, spec: str = ".1f", suffix: str = "") -> str:
    return "-" if x is None else f"{x:{spec}}{suffix}"


def _marginal(points: list[tuple[int, float]]) -> dict | None:
    """(n2-n1)/(t2-t1) over the two largest sizes, plus the implied fixed cost (intercept)."""
    if len(points) < 2:
        return None
    (n1, t1), (n2, t2) = sorted(points)[-2:]
    return _marginal_pair((n1, t1), (n2, t2))


def _marginal_pair(p1: tuple[int, float], p2: tuple[int, float]) -> dict:
    (n1, t1), (n2, t2) = p1, p2
    dt = t2 - t1
    rate = (n2 - n1) / dt if dt > 0 else None
    intercept = (t1 - n1 / rate) if rate else None
    return {"n1": n1, "n2": n2, "t1": t1, "t2": t2, "rows_per_s": rate, "intercept_s": intercept}


def summarize(results: dict) -> dict:
    runs = results.get("runs", {})
    ours_pts = [(int(n), e["ours"]["wall_s"]) for n, e in runs.items() if _ok(e.get("ours"))]
    dj_pts = [(int(n), e["dj"]["wall_s"]) for n, e in runs.items() if _ok(e.get("dj"))]
    s: dict = {"per_size": []}
    for n, e in sorted(runs.items(), key=lambda kv: int(kv[0])):
        o, d = e.get("ours"), e.get("dj")
        row = {
            "rows": int(n),
            "ours_wall_s": o["wall_s"] if _ok(o) else None,
            "dj_wall_s": d["wall_s"] if _ok(d) else None,
            "ours_peak_tree_rss": o.get("peak_tree_rss") if _ok(o) else None,
            "ours_peak_tree_pss": o.get("peak_tree_pss") if _ok(o) else None,
            "dj_peak_tree_rss": d.get("peak_tree_rss") if _ok(d) else None,
            "dj_peak_tree_pss": d.get("peak_tree_pss") if _ok(d) else None,
            "ours_error": None if _ok(o) else (o or {}).get("error"),
            "dj_error": None if _ok(d) else ((d or {}).get("error") or e.get("dj_skipped")),
            "check": (e.get("check") or {}).get("status"),
            "ours_cpu_s": o.get("cpu_tree_s") if _ok(o) else None,
            "dj_cpu_s": d.get("cpu_tree_s") if _ok(d) else None,
            # Other users' CPU load during the run, in cores (0 = quiet machine).
            "ours_other_load": (o["foreign_cpu_s"] / o["wall_s"]) if _ok(o) and o.get("wall_s") else None,
            "dj_other_load": (d["foreign_cpu_s"] / d["wall_s"]) if _ok(d) and d.get("wall_s") else None,
            "ours_retried": len((o or {}).get("failed_attempts") or []),
        }
        row["ratio"] = (row["ours_wall_s"] / row["dj_wall_s"]) if row["ours_wall_s"] and row["dj_wall_s"] else None
        row["ours_rows_s"] = int(n) / row["ours_wall_s"] if row["ours_wall_s"] else None
        row["dj_rows_s"] = int(n) / row["dj_wall_s"] if row["dj_wall_s"] else None
        s["per_size"].append(row)

    s["ours_marginal"] = _marginal(ours_pts)
    s["dj_marginal"] = _marginal(dj_pts)
    # Same pair of sizes for both, when possible (the apples-to-apples ratio).
    common = sorted(set(n for n, _ in ours_pts) & set(n for n, _ in dj_pts))
    if len(common) >= 2:
        n1, n2 = common[-2:]
        od, dd = dict(ours_pts), dict(dj_pts)
        s["same_pair"] = {
            "ours": _marginal_pair((n1, od[n1]), (n2, od[n2])),
            "dj": _marginal_pair((n1, dd[n1]), (n2, dd[n2])),
        }
        o_r, d_r = s["same_pair"]["ours"]["rows_per_s"], s["same_pair"]["dj"]["rows_per_s"]
        s["marginal_ratio"] = o_r / d_r if o_r and d_r else None
        s["marginal_ratio_pair"] = [n1, n2]
    # Each executor over its own two largest sizes (steadier for ours: a bigger time difference).
    if s["ours_marginal"] and s["dj_marginal"]:
        o_r, d_r = s["ours_marginal"]["rows_per_s"], s["dj_marginal"]["rows_per_s"]
        s["marginal_ratio_largest_pairs"] = o_r / d_r if o_r and d_r else None
    # The bar is judged on the less favourable of the two.
    cands = [x for x in (s.get("marginal_ratio"), s.get("marginal_ratio_largest_pairs")) if x]
    s["marginal_ratio_for_bar"] = min(cands) if cands else None

    st = results.get("startup", {})
    for key in ("ours_1row", "ours_0row", "dj_1row", "dj_0row"):
        r = st.get(key)
        if r:
            s[f"startup_{key}"] = {
                "wall_s": r["wall_s"],
                "rc": r["rc"],
                "error": r.get("error"),
                "error_line": r.get("error_line"),
                "peak_tree_pss": r.get("peak_tree_pss"),
                "breakdown": r.get("breakdown"),
            }

    h = results.get("hash") or {}
    if "byte_stream_xxh3" in h:
        s["hash"] = {
            "byte_stream_mb_s": h["byte_stream_xxh3"]["mb_s"],
            "arrow_mb_s": h["arrow_table_xxh3"]["mb_s"],
            "rowwise_sha256_mb_s": h["rowwise_json_sha256"]["mb_s_incl_conversion"],
            "rowwise_sha256_mb_s_excl_conversion": h["rowwise_json_sha256"]["mb_s_excl_conversion"],
            "raw_sha256_mb_s": h["raw_sha256_bytes"]["mb_s"],
            "planner_hash_mb_s": h["plan_partitions"]["hash_mb_s"],
            "planner_total_mb_s": h["plan_partitions"]["total_mb_s"],
            "speedup_byte_stream_vs_rowwise": h["speedup_byte_stream_vs_rowwise"],
            "speedup_arrow_vs_rowwise": h["speedup_arrow_vs_rowwise"],
        }
    p = results.get("parse") or {}
    if "first_ms_per_recipe" in p:
        s["parse"] = {
            k: p[k]
            for k in (
                "n_recipes",
                "import_provider_s",
                "import_airflow_s",
                "first_ms_per_recipe",
                "warm_ms_per_recipe",
                "dags_built",
                "tasks_per_dag",
            )
        }

    # Bars
    bars = []
    mr = s.get("marginal_ratio_for_bar")
    parts = []
    if s.get("marginal_ratio"):
        parts.append(
            f"same sizes {s['marginal_ratio_pair'][0]}->{s['marginal_ratio_pair'][1]}: {s['marginal_ratio']:.1f}x"
        )
    if s.get("marginal_ratio_largest_pairs"):
        om, dm = s["ours_marginal"], s["dj_marginal"]
        parts.append(
            f"each its largest sizes (ours {om['n1']}->{om['n2']}, DJ {dm['n1']}->{dm['n2']}): "
            f"{s['marginal_ratio_largest_pairs']:.1f}x"
        )
    bars.append(
        {
            "bar": f"marginal throughput >= {BAR_MARGINAL_RATIO:g}x Data-Juicer's",
            "value": None if mr is None else f"{mr:.1f}x (lower of: {'; '.join(parts)})",
            "pass": None if mr is None else mr >= BAR_MARGINAL_RATIO,
        }
    )
    e2e = next((r for r in s["per_size"] if r["rows"] == BAR_E2E_SIZE), None)
    ratio = e2e["ratio"] if e2e else None
    bars.append(
        {
            "bar": f"end-to-end at {BAR_E2E_SIZE} rows <= {BAR_E2E_RATIO:g}x Data-Juicer's wall time",
            "value": None
            if ratio is None
            else f"{ratio:.2f}x ({e2e['ours_wall_s']:.1f} s vs {e2e['dj_wall_s']:.1f} s)",
            "pass": None if ratio is None else ratio <= BAR_E2E_RATIO,
        }
    )
    # The issue defines the fixed start-up on an empty input; the 1-row run (which
    # also starts Ray and runs every op once) is shown beside it.
    su0, su1 = (s.get("startup_ours_0row") or {}), (s.get("startup_ours_1row") or {})
    su_t = su0.get("wall_s") if su0.get("rc") == 0 else None
    one = f"; 1-row run {su1['wall_s']:.1f} s" if su1.get("rc") == 0 else ""
    bars.append(
        {
            "bar": f"fixed start-up (empty input) < {BAR_STARTUP_S:g} s",
            "value": None if su_t is None else f"{su_t:.1f} s{one}",
            "pass": None if su_t is None else su_t < BAR_STARTUP_S,
        }
    )
    hs = s.get("hash")
    bars.append(
        {
            "bar": "partition hashing >= 1 GB/s per core (JSONL byte-stream kernel)",
            "value": None
            if not hs
            else f"{hs['byte_stream_mb_s']:.0f} MB/s (Arrow kernel {hs['arrow_mb_s']:.0f} MB/s)",
            "pass": None if not hs else hs["byte_stream_mb_s"] >= BAR_HASH_MB_S,
        }
    )
    s["bars"] = bars
    return s


def render_table(results: dict, s: dict) -> str:
    m = results["machine"]
    v = m.get("versions", {})
    L: list[str] = []
    L.append("=" * 120)
    L.append(f"dj-airflow vs Data-Juicer {v.get('py-data-juicer', '?')} (default executor)  -  {results['timestamp']}")
    L.append(
        f"machine: {m['nproc']} CPUs ({m.get('cpu_model')}), {m['ram_bytes'] / 2**30:.1f} GiB RAM, {m['platform']}"
    )
    g = m.get("git") or {}
    snap = results["config"].get("snapshot")
    if snap:
        L.append(f"code: snapshot of commit {snap['commit'][:10]} (working-tree edits excluded)")
    elif g.get("commit"):
        L.append(
            f"code: working tree at commit {g['commit'][:10]}"
            + (f" + {g['modified_tracked_files']} modified tracked files" if g.get("modified_tracked_files") else "")
            + " (edits made during the run are measured too)"
        )
    L.append(
        f"versions: python {v.get('python')}, airflow {v.get('apache-airflow')}, ray {v.get('ray')}, "
        f"pyarrow {v.get('pyarrow')}; ours: partitions={results['config']['partitions']}, checkpoint every_op; "
        f"DJ: np={results['config']['dj_np']}, use_cache=false; nice {results['config'].get('nice', 0)}"
    )
    L.append(
        "wall = whole process, launch to exit; peak mem = max over samples of the summed RSS (PSS) of the process tree;"
    )
    L.append("CPU s = user+system CPU seconds of the whole process tree (less sensitive to other load than wall time);")
    L.append(
        "other load = CPU cores used by other processes on the machine during the run, ours/DJ "
        "(0.00 = quiet; high values mean the timing is disturbed)"
    )
    L.append("-" * 120)
    L.append(
        f"{'rows':>9} | {'ours s':>7} | {'DJ s':>7} | {'ours/DJ':>7} | {'ours rows/s':>11} | {'DJ rows/s':>9} | "
        f"{'ours peak RSS (PSS)':>21} | {'DJ peak RSS (PSS)':>21} | {'CPU s ours/DJ':>13} | {'other load':>10} | check"
    )
    for r in s["per_size"]:
        o_mem = (
            f"{gib(r['ours_peak_tree_rss'])} ({gib(r['ours_peak_tree_pss']).replace(' GiB', '')})"
            if r["ours_wall_s"]
            else "-"
        )
        d_mem = (
            f"{gib(r['dj_peak_tree_rss'])} ({gib(r['dj_peak_tree_pss']).replace(' GiB', '')})"
            if r["dj_wall_s"]
            else "-"
        )
        L.append(
            f"{r['rows']:>9} | {_fmt(r['ours_wall_s']):>7} | {_fmt(r['dj_wall_s']):>7} | "
            f"{_fmt(r['ratio'], '.2f'):>7} | {_fmt(r['ours_rows_s'], ',.0f'):>11} | "
            f"{_fmt(r['dj_rows_s'], ',.0f'):>9} | {o_mem:>21} | {d_mem:>21} | "
            f"{_fmt(r['ours_cpu_s'], '.0f'):>6}/{_fmt(r['dj_cpu_s'], '.0f'):<6} | "
            f"{_fmt(r['ours_other_load'], '.2f')}/{_fmt(r['dj_other_load'], '.2f'):<5} | {r['check'] or '-'}"
        )
        if r["ours_retried"]:
            L.append(f"{'':>9}   ours: re-run {r['ours_retried']}x after Ray was killed under it (see JSON)")
        if r["ours_error"]:
            L.append(f"{'':>9}   ours: {r['ours_error']}")
        if r["dj_error"]:
            L.append(f"{'':>9}   DJ: {r['dj_error']}")
    L.append("-" * 120)
    for key, label in (
        ("startup_ours_1row", "ours, 1-row input"),
        ("startup_ours_0row", "ours, 0-row input"),
        ("startup_dj_1row", "DJ,   1-row input"),
        ("startup_dj_0row", "DJ,   0-row input"),
    ):
        st = s.get(key)
        if not st:
            continue
        if st["rc"] == 0:
            extra = ""
            bd = st.get("breakdown") or {}
            if "before_first_task_s" in bd:
                extra = (
                    f"  (launch->first task {bd['before_first_task_s']:.1f} s, tasks "
                    f"{bd.get('tasks_span_s', 0):.1f} s, last task->exit {bd.get('after_last_task_s', 0):.1f} s)"
                )
            L.append(f"fixed start-up, {label}: {st['wall_s']:.1f} s{extra}")
            reps = (results.get("startup") or {}).get(key.replace("startup_", "") + "_repeats")
            if reps:
                L.append(
                    f"   (fastest of {len(reps)} runs: "
                    + ", ".join(f"{r['wall_s']:.1f}" if r["rc"] == 0 else "failed" for r in reps)
                    + " s)"
                )
        else:
            L.append(
                f"fixed start-up, {label}: FAILED after {st['wall_s']:.1f} s ({st.get('error')}): "
                f"{st.get('error_line') or ''}"
            )
    warm = results.get("warmup")
    if warm:
        L.append(
            f"warm-up run (not counted; {'incl. one-time airflow db migrate' if warm['db_migrated_in_this_run'] else 'DB already migrated'}): "
            f"{warm['wall_s']:.1f} s"
        )
    for key, label in (("ours_marginal", "ours"), ("dj_marginal", "DJ  ")):
        mm = s.get(key)
        if mm and mm["rows_per_s"]:
            L.append(
                f"marginal throughput {label} ({mm['n1']}->{mm['n2']} rows): {mm['rows_per_s']:,.0f} rows/s"
                f"  (implied fixed cost {mm['intercept_s']:.1f} s)"
            )
    sp = s.get("same_pair")
    if sp and sp["ours"]["rows_per_s"] and sp["dj"]["rows_per_s"]:
        L.append(
            f"marginal throughput, same sizes {sp['ours']['n1']}->{sp['ours']['n2']}: ours "
            f"{sp['ours']['rows_per_s']:,.0f} rows/s vs DJ {sp['dj']['rows_per_s']:,.0f} rows/s = "
            f"{s['marginal_ratio']:.2f}x"
        )
    if s.get("marginal_ratio_largest_pairs"):
        L.append(
            f"marginal throughput, each over its two largest sizes: ours/DJ = {s['marginal_ratio_largest_pairs']:.2f}x"
        )
    hs = s.get("hash")
    if hs:
        L.append(
            f"partition hash, 1 core, data in memory (MB = 10^6 B): xxh3 byte-stream {hs['byte_stream_mb_s']:,.0f} MB/s, "
            f"xxh3 Arrow columns {hs['arrow_mb_s']:,.0f} MB/s; per-row JSON+sha256 {hs['rowwise_sha256_mb_s']:,.1f} MB/s "
            f"({hs['rowwise_sha256_mb_s_excl_conversion']:,.1f} excl. Arrow->dict); raw sha256 {hs['raw_sha256_mb_s']:,.0f} MB/s"
        )
        L.append(
            f"   speed-up vs per-row JSON+sha256: byte-stream {hs['speedup_byte_stream_vs_rowwise']:,.0f}x, "
            f"Arrow {hs['speedup_arrow_vs_rowwise']:,.0f}x (per row); planner (index+hash from page cache): "
            f"hash {_fmt(hs['planner_hash_mb_s'], ',.0f')} MB/s, total {_fmt(hs['planner_total_mb_s'], ',.0f')} MB/s"
        )
    elif results.get("hash", {}).get("error"):
        L.append(f"hash bench failed: {results['hash']['error']}")
    ps = s.get("parse")
    if ps:
        L.append(
            f"DAG parse, {ps['n_recipes']} recipes ({ps['tasks_per_dag']} tasks each): first pass "
            f"{ps['first_ms_per_recipe']:.1f} ms/recipe, re-parse {ps['warm_ms_per_recipe']:.1f} ms/recipe; "
            f"one-time imports: provider {ps['import_provider_s'] * 1000:.0f} ms + airflow.sdk/operators "
            f"{ps['import_airflow_s'] * 1000:.0f} ms"
        )
    elif results.get("parse", {}).get("error"):
        L.append(f"parse bench failed: {results['parse']['error']}")
    checks = [(n, e["check"]) for n, e in results.get("runs", {}).items() if e.get("check")]
    if results.get("startup", {}).get("check_1row"):
        checks.insert(0, ("1", results["startup"]["check_1row"]))
    if checks:
        L.append(
            "export check (ours vs DJ, text sequence + row count): "
            + ", ".join(f"{n} rows {c['status']}" for n, c in checks)
        )
    L.append("-" * 120)
    for b in s["bars"]:
        verdict = "n/a " if b["pass"] is None else ("PASS" if b["pass"] else "FAIL")
        L.append(f"[{verdict}] {b['bar']}: {b['value'] or 'not measured'}")
    for note in results.get("notes", []):
        L.append(f"note: {note}")
    L.append("=" * 120)
    return "\n".join(L)


def panels(results: dict, s: dict) -> list[dict]:
    """The chart: wall time per size (ours beside Data-Juicer's) and, when measured, the hash kernels."""
    rows = [r for r in s["per_size"] if r["ours_wall_s"] or r["dj_wall_s"]]
    out = [
        {
            "title": "End-to-end wall time, launch to exit (lower is better)",
            "unit": " s",
            "fmt": "{:,.1f}",
            "series": [("ours", "dj-airflow", "#4c78a8"), ("dj", "Data-Juicer default", "#f58518")],
            "bars": [(f"{r['rows']:,} rows", (r["ours_wall_s"], r["dj_wall_s"])) for r in rows],
        }
    ]
    hs = s.get("hash")
    if hs:
        out.append(
            {
                "title": "Partition-hash throughput, 1 core (MB/s)",
                "fmt": "{:,.0f}",
                "log": True,
                "bars": [
                    ("xxh3 bytes", hs["byte_stream_mb_s"]),
                    ("xxh3 Arrow", hs["arrow_mb_s"]),
                    ("row JSON+sha256", hs["rowwise_sha256_mb_s"]),
                    ("raw sha256", hs["raw_sha256_mb_s"]),
                ],
            }
        )
    return out


def render_svg(results: dict, s: dict) -> str:
    m = results["machine"]
    return chart(
        "dj-airflow vs Data-Juicer, end to end",
        f"{m['nproc']} CPUs, {m['ram_bytes'] / 2**30:.0f} GiB RAM; {results['timestamp']}",
        panels(results, s),
    )


def finish(bench, results: dict, t_start: float) -> int:
    results["total_bench_s"] = time.perf_counter() - t_start
    s = summarize(results)
    results["summary"] = s
    table = render_table(results, s)
    print("\n" + table, flush=True)
    base = os.path.join(bench.out, f"bench_{bench.ts}")
    write_text(base + ".svg", render_svg(results, s))
    write_json(base + ".json", results)
    write_text(base + ".txt", table + "\n")
    print(f"results: {base}.json  (table: {base}.txt, chart: {base}.svg; logs: {bench.logs})")
    failed = [
        n for n, e in results.get("runs", {}).items() if not _ok(e.get("ours")) or ("dj" in e and not _ok(e["dj"]))
    ]
    mismatched = [n for n, e in results.get("runs", {}).items() if e.get("check") and e["check"]["status"] != "MATCH"]
    return 1 if failed or mismatched else 0
