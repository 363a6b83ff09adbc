"""Markdown tables and the SVG chart of the gathered run (``python -m bench all``), from its results alone.

Pure functions of the results dict (no measuring, no files read), so a
report can be re-rendered from an old ``results.json`` with
``-m bench all --render`` and the unit test can feed it a fixed dict.  The
same section tables are printed to the console as each section finishes.
"""

from __future__ import annotations

import math

from bench.report import chart, gib, md_table


def _f(x, spec: str = ".1f", suffix: str = "") -> str:
    return "–" if x is None else f"{x:{spec}}{suffix}"


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{x * 100:+.1f} %"


def _share(x: float | None) -> str:
    return "–" if x is None else f"{x * 100:.1f} %"


def _verdict(ok: bool | None) -> str:
    return "n/a" if ok is None else ("PASS" if ok else "FAIL")


def _ck_label(ck: dict) -> str:
    if not ck.get("enabled", True):
        return "disabled"
    extra = {k: v for k, v in ck.items() if k not in ("enabled", "strategy")}
    return ck.get("strategy", "?") + "".join(
        f" {k}={','.join(v) if isinstance(v, list) else v}" for k, v in extra.items()
    )


# ------------------------------------------------------------------ sections


def checkpoint_md(d: dict) -> str:
    rows = []
    for r in d["table"]:
        if not r.get("ok"):
            rows.append([f"`{r['strategy']}`", _ck_label(r["checkpoint"])] + ["failed"] + ["–"] * 8)
            continue
        same = r.get("same_export_as_baseline")
        rows.append(
            [
                f"`{r['strategy']}`",
                _ck_label(r["checkpoint"]),
                _f(r["wall_s"]),
                "baseline" if r["strategy"] == d["baseline"] else _pct(r.get("overhead_wall")),
                _f(r.get("partition_tasks_s")),
                "baseline" if r["strategy"] == d["baseline"] else _pct(r.get("overhead_partition_tasks")),
                _f(r.get("cpu_tree_s"), ".0f"),
                "baseline" if r["strategy"] == d["baseline"] else _pct(r.get("overhead_cpu")),
                gib(r.get("peak_tree_pss")),
                f"{r.get('rows_out'):,}" if r.get("rows_out") is not None else "–",
                "yes" if same else ("NO" if same is False else "–"),
            ]
        )
    aim = d["aim"]
    return "\n".join(
        [
            f"Spine recipe, {d['rows']:,} rows, 4 partitions; best of {d['repeats']} per strategy "
            f"(run round-robin); baseline `{d['baseline']}` measured in the same run.",
            "",
            md_table(
                [
                    "strategy",
                    "checkpoint section",
                    "wall s",
                    "overhead (wall)",
                    "partition tasks s",
                    "overhead (tasks)",
                    "CPU s",
                    "overhead (CPU)",
                    "peak PSS",
                    "rows out",
                    "export = baseline",
                ],
                rows,
            ),
            "",
            f"**Aim: {aim['what']}: {_verdict(aim['pass'])}** ({_pct(aim['value'])})",
            "",
            "CPU seconds of the whole process tree move much less with other load than wall time does; on a busy "
            "machine read the CPU column first.",
        ]
    )


def resume_md(d: dict) -> str:
    if d.get("error"):
        return f"Resume section failed: {d['error']}"
    rows = []
    for r in d["table"]:
        ev = r.get("events") or {}
        status = "" if r.get("rc") in (0, None) else f" (exit {r.get('rc')})"
        rows.append(
            [
                r["case"] + status,
                _f(r.get("wall_s")),
                _share(r.get("share_of_full")),
                _f(r.get("validate_s"), ".2f"),
                _share(r.get("validate_share_of_full")),
                str(ev.get("checkpoints_loaded", "–")),
                str(ev.get("op_units_redone", "–")),
            ]
        )
    c = d["checks"]
    same = {True: "identical", False: "DIFFERENT", None: "not checked"}
    return "\n".join(
        [
            f"Spine recipe, {d['rows']:,} rows, every_op checkpoints.  The kill is a `kill_run` fault "
            f"(SIGKILL to the CLI, Ray and its workers) after op 2 of partition 1.",
            "",
            md_table(
                [
                    "case",
                    "wall s",
                    "share of full run",
                    "validate task s",
                    "validate share",
                    "checkpoints loaded",
                    "op units redone",
                ],
                rows,
            ),
            "",
            f"Crash overhead, (killed + resumed) / full − 1: {_pct(d.get('crash_overhead'))}.  "
            f"Export after resuming the completed job: {same[c.get('resume_of_completed_same_export')]}; "
            f"after kill + resume: {same[c.get('resume_after_kill_same_export')]} (vs the full run, byte for byte); "
            f"fault fired: {'yes' if c.get('kill_fired') else 'NO'}.",
        ]
    )


def _scale_rows(rows: list[dict]) -> list[list[str]]:
    out = []
    for r in rows:
        ok = r.get("rc") == 0
        out.append(
            [
                f"{r['rows']:,}",
                f"{r['input_bytes'] / 1e9:.2f}",
                f"{r['partition_rows']:,}",
                str(r.get("num_partitions") or "–"),
                _f(r.get("wall_s")) if ok else f"failed ({r.get('error')})",
                _f(r.get("rows_per_s"), ",.0f"),
                gib(r.get("peak_tree_rss")) if ok else "–",
                gib(r.get("peak_tree_pss")) if ok else "–",
                _f(r.get("other_load"), ".2f"),
            ]
        )
    return out


def scale_md(d: dict) -> str:
    hdr = ["rows", "input GB", "rows/partition", "partitions", "wall s", "rows/s", "peak RSS", "peak PSS", "other load"]
    b = d.get("bounded")
    bl = "not enough sizes to judge"
    if b:
        bl = (
            f"**Peak PSS bounded by partition size: {_verdict(b['pass'])}**: {b['largest_rows']:,} rows use "
            f"{b['pss_ratio']:.2f}× the peak PSS of {b['reference_rows']:,} rows ({b['input_ratio']:.0f}× the "
            f"input, at most {d['partition_rows']:,} rows per partition in both; limit {b['limit']:g}×)"
        )
    return "\n".join(
        [
            f"By input size, {d['partition_rows']:,} rows per partition (spine recipe, every_op):",
            "",
            md_table(hdr, _scale_rows(d["by_size"])),
            "",
            f"By partition size, {d['sweep_at_rows']:,} rows:",
            "",
            md_table(hdr, _scale_rows(d["by_partition_size"])),
            "",
            bl,
        ]
    )


def ops_md(d: dict) -> str:
    if d.get("error"):
        return f"Per-op section failed: {d['error']}"
    m = d.get("meta", {})
    rows = []
    for name, r in d.get("ops", {}).items():
        o, j = r.get("ours", {}), r.get("dj", {})
        kept = "–"
        if o.get("kept") is not None and j.get("kept") is not None:
            k = o.get("kept_on_dj_rows", o["kept"])
            kept = f"{k:,}/{j['kept']:,}" + ("" if k == j["kept"] else " DIFF")
        sp = r.get("speedup")
        rows.append(
            [
                f"`{name}`",
                o.get("kind") or j.get("kind") or "?",
                _f(o.get("rows_per_s"), ",.0f") if not o.get("error") else "error",
                _f(j.get("rows_per_s"), ",.0f"),
                _f(sp, ".1f", "×"),
                kept,
            ]
        )
    sps = [r["speedup"] for r in d.get("ops", {}).values() if r.get("speedup")]
    geo = math.exp(sum(math.log(s) for s in sps) / len(sps)) if sps else None
    dj = m.get("dj_version") or "not run"
    lines = [
        f"{m.get('rows', 0):,} rows in memory, one core; ours best of {m.get('repeats')}; Data-Juicer {dj} "
        f"(bare op methods in its own virtualenv; see bench/ops/README.md).",
        "",
        md_table(["op", "kind", "ours rows/s", "DJ rows/s", "speed-up", "kept ours/DJ"], rows),
    ]
    if geo:
        lines += ["", f"Geometric mean speed-up over {len(sps)} ops: {geo:.1f}×."]
    if d.get("not_benchmarked"):
        lines += [
            "",
            "Not benchmarked (model or API ops, no arguments in bench/ops/run_ops_bench.py's OP_ARGS): "
            + ", ".join(f"`{n}`" for n in d["not_benchmarked"])
            + ".",
        ]
    return "\n".join(lines)


SECTIONS = (
    ("checkpoint", "Checkpoint cost per strategy", checkpoint_md),
    ("resume", "Resume cost", resume_md),
    ("scale", "Scale: wall time and peak memory", scale_md),
    ("ops", "Per-op throughput against Data-Juicer", ops_md),
)


def section_md(key: str, data: dict) -> str:
    for k, title, fn in SECTIONS:
        if k == key:
            return f"## {title}\n\n{fn(data)}\n"
    raise KeyError(key)


# ------------------------------------------------------------------ whole report


def machine_md(m: dict) -> str:
    v = m.get("versions", {})
    lines = [
        f"* CPU: {m.get('cpu_model') or 'unknown'}; {m.get('nproc')} usable cores "
        f"({m.get('cpu_count_logical')} logical) — from /proc/cpuinfo and nproc",
        f"* Memory: {m['ram_bytes'] / 2**30:.1f} GiB total, {m.get('ram_available_bytes', 0) / 2**30:.1f} GiB "
        f"available at the start — from `free`",
        f"* Disk free under the results directory at the start: {m.get('disk_free_bytes', 0) / 1e9:.0f} GB",
        f"* GPU: {m.get('gpu') or 'none'}",
        f"* OS: {m.get('platform')}",
        f"* Load average at the start: {m.get('loadavg_start')}",
        "* Versions: " + ", ".join(f"{k} {val}" for k, val in v.items() if val),
    ]
    g = m.get("git") or {}
    if g.get("commit"):
        lines.append(
            f"* Code: working tree at commit `{g['commit'][:10]}`"
            + (f" with {g['modified_tracked_files']} modified tracked files" if g.get("modified_tracked_files") else "")
        )
    return "\n".join(lines)


def render_markdown(results: dict, plot_name: str | None = None) -> str:
    cfg = results["config"]
    head = [
        "# Benchmarks, gathered",
        "",
        f"Produced by `{' '.join(['python -m bench all', *results.get('argv', [])])}` on {results['timestamp']}"
        f" ({'quick smoke run' if cfg.get('quick') else 'full run'}; took {results.get('total_s', 0) / 60:.0f} min).  "
        "How to run it and what each section measures: [benchmarks.md](benchmarks.md#gathered-run-benchrun_allpy).",
        "",
    ]
    if results.get("snapshot"):
        head += [f"Code: a snapshot of commit `{results['snapshot']['commit'][:10]}` (`--snapshot`).", ""]
    if cfg.get("quick"):
        head += [
            "> **Smoke-run figures** (small sizes): they show that every section works, not how fast the "
            "code is.  The full run replaces them.",
            "",
        ]
    head += ["## Machine", "", machine_md(results["machine"]), ""]
    loads = results.get("other_load_summary")
    if loads:
        head += [
            f"Other processes used {loads['mean']:.2f} cores on average (max {loads['max']:.2f}) during "
            f"the measured runs: "
            + ("a busy, shared machine — treat every figure as noisy." if loads["max"] > 0.25 else "a quiet machine."),
            "",
        ]
    if plot_name:
        head += [f"![gathered benchmark chart]({plot_name})", ""]
    body = [section_md(k, results["sections"][k]) for k, _, _ in SECTIONS if k in results.get("sections", {})]
    notes = [f"* {n}" for n in results.get("notes", [])]
    return "\n".join(head) + "\n" + "\n".join(body) + ("\n## Notes\n\n" + "\n".join(notes) + "\n" if notes else "")


def panels(results: dict) -> list[dict]:
    s = results.get("sections", {})
    out: list[dict] = []
    ck = s.get("checkpoint")
    if ck:
        out.append(
            {
                "title": f"Checkpoint overhead vs disabled, wall time ({ck['rows']:,} rows)",
                "unit": " %",
                "fmt": "{:+.1f}",
                "ref": 10.0,
                "ref_label": "aim 10 %",
                "bars": [
                    (r["strategy"], None if r.get("overhead_wall") is None else r["overhead_wall"] * 100)
                    for r in ck["table"]
                    if r["strategy"] != ck["baseline"]
                ],
            }
        )
    rs = s.get("resume")
    if rs and not rs.get("error"):
        out.append(
            {
                "title": f"Resume: wall time as a share of the full run ({rs['rows']:,} rows)",
                "unit": " %",
                "fmt": "{:.1f}",
                "bars": [
                    (r["case"], None if r.get("share_of_full") is None else r["share_of_full"] * 100)
                    for r in rs["table"]
                ],
            }
        )
    sc = s.get("scale")
    if sc:
        out.append(
            {
                "title": f"Peak PSS of the process tree by input size ({sc['partition_rows']:,} rows/partition)",
                "unit": " GiB",
                "fmt": "{:.2f}",
                "bars": [
                    (f"{r['rows']:,} rows", (r["peak_tree_pss"] / 2**30) if r.get("rc") == 0 else None)
                    for r in sc["by_size"]
                ],
            }
        )
        out.append(
            {
                "title": "Wall time by input size",
                "unit": " s",
                "fmt": "{:.1f}",
                "bars": [(f"{r['rows']:,} rows", r.get("wall_s") if r.get("rc") == 0 else None) for r in sc["by_size"]],
            }
        )
        out.append(
            {
                "title": f"Peak PSS by partition size ({sc['sweep_at_rows']:,} rows)",
                "unit": " GiB",
                "fmt": "{:.2f}",
                "bars": [
                    (
                        f"{r['partition_rows']:,} rows/partition",
                        (r["peak_tree_pss"] / 2**30) if r.get("rc") == 0 else None,
                    )
                    for r in sc["by_partition_size"]
                ],
            }
        )
    ops = s.get("ops")
    if ops and not ops.get("error"):
        sp = sorted(((n, r["speedup"]) for n, r in ops.get("ops", {}).items() if r.get("speedup")), key=lambda x: x[1])
        if sp:
            out.append(
                {
                    "title": "Per-op speed-up, ours / Data-Juicer (rows/s)",
                    "unit": "×",
                    "fmt": "{:.1f}",
                    "log": True,
                    "ref": 1.0,
                    "ref_label": "1× (parity)",
                    "bars": sp,
                }
            )
        else:
            out.append(
                {
                    "title": "Per-op throughput, ours (rows/s; Data-Juicer not run)",
                    "fmt": "{:,.0f}",
                    "log": True,
                    "bars": sorted(
                        (
                            (n, r["ours"].get("rows_per_s"))
                            for n, r in ops.get("ops", {}).items()
                            if r.get("ours", {}).get("rows_per_s")
                        ),
                        key=lambda x: x[1],
                    ),
                }
            )
    return out


def render_svg(results: dict) -> str:
    m = results["machine"]
    sub = (
        f"{m.get('nproc')} cores ({m.get('cpu_model')}), {m['ram_bytes'] / 2**30:.0f} GiB RAM; "
        f"{results['timestamp']}; {'quick smoke run' if results['config'].get('quick') else 'full run'}"
    )
    return chart("dj-airflow benchmarks, gathered", sub, panels(results))
