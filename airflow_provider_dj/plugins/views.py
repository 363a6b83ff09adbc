"""The job view's HTML: server-rendered, no build step, no network at run time.

Charts are inline SVG drawn here; ``static/job_view.js`` only fetches the
per-partition panel, pages failed samples, shows tracer samples and runs
the "why" look-up.  Every value from the job directory is escaped.
"""

from __future__ import annotations

import html
import json
from datetime import datetime, timezone

STATE_COLORS = {
    "completed": "#2e7d32",
    "running": "#1e88e5",
    "failed": "#d32f2f",
    "partial": "#f9a825",
    "pending": "#bdbdbd",
    "stopped": "#8e24aa",
    "stopping": "#8e24aa",
    "interrupted": "#ef6c00",
    "planned": "#9e9e9e",
    "started": "#1e88e5",  # a Ray Job's driver runs (Ray Jobs mode)
    "succeeded": "#2e7d32",
}


def esc(x) -> str:
    return html.escape("" if x is None else str(x), quote=True)


def _t(ts) -> str:
    return datetime.fromtimestamp(float(ts), tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ") if ts else "-"


def page(title: str, body: str, *, static: str, data: dict | None = None) -> str:
    attrs = "".join(f' data-{esc(k)}="{esc(v)}"' for k, v in (data or {}).items())
    return (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>{esc(title)}</title><link rel='stylesheet' href='{esc(static)}/job_view.css'></head>"
        f"<body{attrs}>{body}<script src='{esc(static)}/job_view.js'></script></body></html>"
    )


def badge(state: str) -> str:
    return f"<span class='badge' style='background:{STATE_COLORS.get(state, '#757575')}'>{esc(state)}</span>"


# -- charts ----------------------------------------------------------------------------


def funnel_svg(funnel: list[dict]) -> str:
    """One bar per op: rows out (green) and what it removed (filtered, duplicates, failed)."""
    if not funnel:
        return "<p class='muted'>No op has run yet.</p>"
    top = max([int(o.get("rows_in") or 0) for o in funnel] + [1])
    bar_w, row_h, label_w = 520, 26, 260
    h = row_h * len(funnel) + 24
    parts = [f"<svg class='chart' id='funnel-chart' width='{label_w + bar_w + 260}' height='{h}' role='img'>"]
    colors = (("rows_out", "#2e7d32"), ("filtered", "#f9a825"), ("duplicates", "#8e24aa"), ("failed", "#d32f2f"))
    for i, o in enumerate(funnel):
        y = 4 + i * row_h
        parts.append(f"<text x='0' y='{y + 15}' class='lbl'>{esc(o['op_index'])} {esc(o['op_name'])}</text>")
        x = label_w
        for key, color in colors:
            v = int(o.get(key) or 0)
            w = bar_w * v / top
            if v:
                parts.append(
                    f"<rect x='{x:.1f}' y='{y}' width='{max(w, 1):.1f}' height='{row_h - 8}' fill='{color}'>"
                    f"<title>{esc(key)}: {v:,}</title></rect>"
                )
            x += w
        parts.append(
            f"<text x='{label_w + bar_w + 8}' y='{y + 15}' class='num'>{int(o.get('rows_in') or 0):,} → "
            f"{int(o.get('rows_out') or 0):,}; −{int(o.get('filtered') or 0):,} filt, "
            f"−{int(o.get('duplicates') or 0):,} dup, −{int(o.get('failed') or 0):,} failed</text>"
        )
    parts.append("</svg>")
    legend = " ".join(f"<span class='key' style='background:{c}'></span>{k}" for k, c in colors)
    return "".join(parts) + f"<div class='legend'>{legend}</div>"


def throughput_svg(points: list[dict]) -> str:
    if not points:
        return "<p class='muted'>No op has completed yet.</p>"
    w, h, pad = 760, 160, 40
    t0 = points[0]["t"] - (points[1]["t"] - points[0]["t"] if len(points) > 1 else 1)
    t1 = points[-1]["t"]
    span = max(t1 - t0, 1e-6)
    top = max([p["rows_per_s"] for p in points] + [1.0])
    xy = [(pad + (p["t"] - t0) / span * (w - 2 * pad), h - pad - p["rows_per_s"] / top * (h - 2 * pad)) for p in points]
    path = " ".join(f"{'M' if i == 0 else 'L'}{x:.1f},{y:.1f}" for i, (x, y) in enumerate(xy))
    return (
        f"<svg class='chart' id='throughput-chart' width='{w}' height='{h}' role='img'>"
        f"<line x1='{pad}' y1='{h - pad}' x2='{w - pad}' y2='{h - pad}' class='axis'/>"
        f"<line x1='{pad}' y1='{pad}' x2='{pad}' y2='{h - pad}' class='axis'/>"
        f"<path d='{path}' fill='none' stroke='#1e88e5' stroke-width='2'/>"
        f"<text x='{pad}' y='{pad - 8}' class='num'>{top:,.0f} rows/s</text>"
        f"<text x='{pad}' y='{h - 12}' class='num'>{esc(_t(t0))}</text>"
        f"<text x='{w - pad}' y='{h - 12}' class='num' text-anchor='end'>{esc(_t(t1))}</text></svg>"
    )


# -- the grid --------------------------------------------------------------------------


def grid_html(grid: dict, focus: set[int] | None = None) -> str:
    segs = grid["segments"]
    rows = grid["rows"]
    if not rows:
        return "<p class='muted'>The job has no partitions yet (validate has not planned it).</p>"
    counts = ", ".join(f"{badge(k)} {v}" for k, v in grid["counts"].items() if v)
    head = "".join(f"<th title='{esc(s['task_id'])}'>{esc(s['task_id'])}</th>" for s in segs)
    out = [
        f"<div class='grid-counts'>{counts}</div>",
        "<label><input type='checkbox' id='only-problems'> only failed / unfinished partitions</label>",
        f"<table class='grid' id='partition-grid'><thead><tr><th>partition (Airflow map index name)</th>{head}"
        "<th>rows in → out</th></tr></thead><tbody>",
    ]
    for r in rows:
        pid = r["partition_id"]
        cls = "focus" if focus and pid in focus else ""
        problem = any(c != "completed" for c in r["cells"])
        cells = "".join(
            f"<td class='cell {c}' data-pid='{pid}' data-state='{c}' title='{esc(r['label'])} · "
            f"{esc(s['task_id'])}[{esc(r['map_index'])}] · {c}'></td>"
            for c, s in zip(r["cells"], segs)
        )
        out_rows = "-" if r["output_rows"] is None else f"{r['output_rows']:,}"
        out.append(
            f"<tr class='{cls}{' problem' if problem else ''}' data-pid='{pid}' data-status='{esc(r['status'])}'>"
            f"<td class='plabel'><a href='#partition' class='open-partition' data-pid='{pid}'>{esc(r['label'])}</a>"
            + (f" <span class='err' title='{esc(r['error'])}'>{esc(str(r['error'])[:80])}</span>" if r["error"] else "")
            + f"</td>{cells}<td class='num'>{r['input_rows'] or 0:,} → {out_rows}</td></tr>"
        )
    out.append("</tbody></table>")
    return "".join(out)


# -- pages ------------------------------------------------------------------------------


def job_page(
    view: dict,
    *,
    api: str,
    static: str,
    focus: set[int] | None = None,
    note: str | None = None,
    found_by: str | None = None,
) -> str:
    """A job's page: header, failure alerts, the partition grid, facts, funnel, throughput and the
    panels the page's script fills from ``api``; ``focus`` marks a task's partitions in the grid."""
    status = view["status"]
    failed_rows = [r for r in view["grid"]["rows"] if r["status"] == "failed"]
    header = [
        f"<h1>Data-Juicer job <code id='job-id'>{esc(view['job_id'])}</code> {badge(status)}</h1>",
        f"<p class='muted'>{esc(view.get('project_name'))} · DAG <code>{esc(view.get('dag_id'))}</code> · run "
        f"<code>{esc(view.get('run_id'))}</code> · started {esc(_t(view.get('start_time')))} · "
        f"dir <code>{esc(view['job_dir'])}</code></p>",
    ]
    if note:
        header.append(f"<p class='note'>{esc(note)}</p>")
    action = _failure_alerts(view, failed_rows)
    facts_html = _facts_html(view, status)
    trace_html = _trace_html(view)
    gpu_html = _gpu_html(view)
    body = "".join(
        [
            *header,
            *action,
            "<h2>Partitions × segments</h2>",
            grid_html(view["grid"], focus),
            "<section id='partition' class='panel' hidden><h2 id='partition-title'></h2>"
            "<div id='partition-body'></div></section>",
            _ray_jobs_html(view),
            "<h2>Job</h2>",
            facts_html,
            "<h2>Per-op funnel</h2>",
            funnel_svg(view["funnel"]),
            "<h2>Throughput over time</h2>",
            throughput_svg(view["throughput"]),
            "<h2>Failed samples</h2><div id='failed-samples' data-partition=''></div>",
            "<h2>Why is a row missing?</h2>"
            "<form id='why-form'><label>input row <input id='why-row' type='number' min='0' required></label> "
            "<button type='submit' id='why-go'>why?</button></form><div id='why-result'></div>",
            "<h2>Tracer samples</h2>",
            f"<div id='trace-ops'>{trace_html}</div><div id='trace-samples'></div>",
            gpu_html,
            f"<p class='muted'>Page data built in {view['built_in_s'] * 1000:.0f} ms. Read-only view.</p>",
        ]
    )
    focus_attr = ",".join(str(p) for p in sorted(focus)) if focus else ""
    data = {"api": api, "focus": focus_attr, "job-found-by": found_by or "job id", "status": status}
    return page(f"DJ job {view['job_id']}", body, static=static, data=data)


def _failure_alerts(view: dict, failed_rows: list[dict]) -> list[str]:
    """The alerts above the grid: which partitions failed and which task instances to clear (or the
    conf to trigger with), and the job's error."""
    action = []
    if failed_rows:
        names = ", ".join(esc(r["label"]) for r in failed_rows[:10]) + (" …" if len(failed_rows) > 10 else "")
        tasks = sorted(
            {
                (s["task_id"], r["map_index"])
                for r in failed_rows
                for c, s in zip(r["cells"], view["grid"]["segments"])
                if c == "failed"
            }
        )
        action.append(
            f"<div class='alert' id='failed-summary'><b>{len(failed_rows)} partition(s) failed:</b> {names}.<br>"
            f"What to click: in Airflow's grid, clear the failed task instance(s) "
            + ", ".join(f"<code>{esc(t)}[{esc(m)}]</code>" for t, m in tasks[:10])
            + " (Clear → only failed, with downstream): the partition resumes from its last checkpoint. "
            f"Or trigger the DAG with conf <code>{esc(json.dumps(view['resume_conf']))}</code>.</div>"
        )
    if view.get("error"):
        action.append(f"<div class='alert'><b>Error:</b> <code>{esc(view['error'])}</code></div>")
    return action


def _facts_html(view: dict, status: str) -> str:
    """The job's facts table: state, resume token and commands, input, failed samples, export."""
    facts = [
        ("state", badge(status)),
        ("resume token", f"<code id='resume-token'>{esc(view['resume_token'])}</code>"),
        ("resume (Airflow conf)", f"<code>{esc(json.dumps(view['resume_conf']))}</code>"),
        ("resume (CLI)", f"<code>{esc(view.get('resume_command'))}</code>"),
        (
            "input",
            esc(
                f"{(view.get('input') or {}).get('total_rows', 0):,} rows in "
                f"{(view.get('input') or {}).get('partitions', 0)} partitions"
            ),
        ),
        ("failed samples", f"{int(view.get('failed_samples') or 0):,}"),
        (
            "export",
            esc((view.get("export") or {}).get("path"))
            + (" (written)" if (view.get("export") or {}).get("written") else " (not yet)"),
        ),
    ]
    if view.get("accounting_errors"):
        facts.append(("accounting errors", esc("; ".join(view["accounting_errors"][:5]))))
    return "<table class='facts'>" + "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in facts) + "</table>"


def _ray_jobs_html(view: dict) -> str:
    """Ray Jobs mode: a table of each group's latest Ray Job from its record; empty for other jobs."""
    rows = view.get("ray_jobs") or []
    if not rows:
        return ""
    body = "".join(
        f"<tr data-submission='{esc(r['submission_id'])}'>{_ray_job_step_cells(r)}"
        f"<td><code>{esc(r['submission_id'])}</code></td>"
        f"<td>{badge(r['state'])}</td><td>{esc(_t(r['submitted_at']))}</td>"
        f"<td class='num'>{'-' if r['resubmissions'] is None else esc(r['resubmissions'])}</td></tr>"
        for r in rows
    )
    return (
        "<h2>Ray Jobs</h2><p class='muted'>Each group's, each global step's and the export's latest Ray Job, "
        "as its driver recorded it in the job "
        "directory (not asked of the Ray dashboard).</p><table class='facts' id='ray-jobs'><tr><th>segment</th>"
        "<th>group</th><th>partitions</th><th>submission id</th><th>state</th><th>submitted</th>"
        f"<th>resubmissions</th></tr>{body}</table>"
    )


def _ray_job_step_cells(row: dict) -> str:
    """A group's segment, group and partitions; a global step's op, or the export, and "all partitions"."""
    if row.get("step") == "export":
        return "<td>export</td><td>-</td><td>all</td>"
    if row.get("op_index") is not None:
        return f"<td>global op {esc(row['op_index'])}</td><td>-</td><td>all</td>"
    parts = ", ".join(map(str, row["partition_ids"]))
    return f"<td>{esc(row['segment_index'])}</td><td>{esc(row['group_id'])}</td><td>{esc(parts)}</td>"


def _trace_html(view: dict) -> str:
    """A button per op with merged tracer samples, or why there are none."""
    trace = view.get("trace") or {}
    return (
        "".join(
            f"<button class='trace-op' data-op='{o['op_index']}'>{esc(o['op_index'])} {esc(o['op_name'])}</button> "
            for o in trace.get("ops", [])
        )
        or "<span class='muted'>No merged tracer files (open_tracer off, or the job has not exported yet); "
        "the 'why' look-up also reads the per-partition candidates.</span>"
    )


def _gpu_html(view: dict) -> str:
    """The GPU probe report, folded; empty when the job has none."""
    gpu = view.get("gpu_report")
    return (
        f"<details><summary>GPU probe report</summary><pre id='gpu-report'>{esc(json.dumps(gpu, indent=2))}</pre></details>"
        if gpu
        else ""
    )


def message_page(title: str, text: str, *, static: str) -> str:
    return page(title, f"<h1>{esc(title)}</h1><p>{esc(text)}</p>", static=static)


def jobs_page(jobs: list[dict], *, root: str, static: str) -> str:
    rows = "".join(
        f"<tr><td><a href='{esc(root)}/job/{esc(j['job_id'])}'>{esc(j['job_id'])}</a></td>"
        f"<td>{badge(j['status'])}</td><td><code>{esc(j['dag_id'])}</code></td><td><code>{esc(j['run_id'])}</code></td>"
        f"<td>{esc(j.get('progress'))}</td></tr>"
        for j in jobs
    )
    body = "<h1>Recent Data-Juicer jobs</h1>" + (
        "<table class='facts' id='jobs'><tr><th>job</th><th>state</th><th>DAG</th><th>last run</th>"
        f"<th>partitions done</th></tr>{rows}</table>"
        if jobs
        else "<p class='muted'>No jobs you may read were found (recent-jobs registry and DJ_WORK_DIR).</p>"
    )
    return page("Data-Juicer jobs", body, static=static)
