"""The per-op run's report (``python -m bench ops``): the printed table and the speed-up chart.

Pure functions of the run's results dict (``ops_<ts>.json``), so
``-m bench ops --render JSON`` re-prints an old run.
"""

from __future__ import annotations

import os

from bench.report import chart


def fmt_rate(v) -> str:
    return f"{v:,.0f}" if isinstance(v, (int, float)) else "n/a"


def render(res: dict) -> str:
    lines = []
    m = res["meta"]
    lines.append(
        f"per-op throughput, {m['rows']:,} rows ({os.path.basename(m['corpus'])}), "
        f"ours best of {m['repeats']}, DJ {m['dj_version'] or 'skipped'} best of {m['dj_repeats']} "
        f"(bare methods, per-op budget {m['dj_budget_s']:.0f}s)"
    )
    lines.append(f"machine: {m['cpus']} cpus; loadavg start {m['loadavg_start']} end {m['loadavg_end']}")
    hdr = f"{'op':34} {'kind':6} {'ours rows/s':>13} {'DJ rows/s':>11} {'speed-up':>9}  {'DJ rows':>8}  kept ours/DJ"
    lines.append(hdr)
    lines.append("-" * len(hdr))
    for name, r in res["ops"].items():
        o, d = r.get("ours", {}), r.get("dj", {})
        ours = o.get("rows_per_s")
        djr = d.get("rows_per_s")
        sp = f"{ours / djr:8.1f}x" if ours and djr else "      n/a"
        kept = ""
        if d.get("kept") is not None and o.get("kept") is not None:
            ok = o.get("kept_on_dj_rows", o["kept"])
            kept = f"{ok}/{d['kept']}" + ("" if ok == d["kept"] else " DIFF")
        note = d.get("error", "")[:40] if d.get("error") else ""
        err = o.get("error", "")[:40] if o.get("error") else ""
        lines.append(
            f"{name:34} {(o.get('kind') or d.get('kind') or '?')[:6]:6} {fmt_rate(ours):>13} "
            f"{fmt_rate(djr):>11} {sp}  {d.get('rows', '') if djr else '':>8}  {kept} {err or note}".rstrip()
        )
    dm = res.get("dedup_global")
    if dm and "error" not in dm:
        mb = 1 / 2**20
        lines.append("")
        lines.append(
            f"exact dedup global phase (first_occurrence_mask), {dm['rows']:,} 16-byte keys in "
            f"{dm['partitions']} partitions: best {dm['seconds'] * 1000:.0f} ms "
            f"({fmt_rate(dm['rows_per_s'])} keys/s), kept {dm['kept']:,}"
        )
        rss = dm.get("rss_peak_delta_bytes")
        lines.append(
            f"  peak memory: tracemalloc {dm['tracemalloc_peak_bytes'] * mb:.1f} MiB, "
            f"RSS high-water delta {rss * mb:.1f} MiB"
            if rss is not None
            else "  RSS: n/a"
        )
        lines.append(
            f"  (keys themselves {dm['key_bytes'] * mb:.1f} MiB; arrow pool peak "
            f"{dm['arrow_pool_max_bytes'] * mb:.1f} MiB)"
        )
    elif dm:
        lines.append(f"dedup global phase: ERROR {dm['error'][-300:]}")
    return "\n".join(lines)


def panels(res: dict) -> list[dict]:
    """Speed-up per op, ours / Data-Juicer (rows/s), log scale; green at or above parity, red below."""
    rows = sorted(
        (
            (n, r["ours"]["rows_per_s"] / r["dj"]["rows_per_s"])
            for n, r in res["ops"].items()
            if r.get("ours", {}).get("rows_per_s") and r.get("dj", {}).get("rows_per_s")
        ),
        key=lambda x: x[1],
    )
    return [
        {
            "title": "Speed-up, ours / Data-Juicer (rows/s)",
            "unit": "x",
            "fmt": "{:.1f}",
            "log": True,
            "ref": 1.0,
            "ref_label": "1x (parity)",
            "colors": ["#54a24b" if s >= 1 else "#e45756" for _, s in rows],
            "bars": rows,
        }
    ]


def render_svg(res: dict) -> str:
    m = res["meta"]
    return chart(f"per-op throughput, {m['rows']:,} rows", f"{m.get('cpus')} cpus; {m.get('timestamp')}", panels(res))
