"""Text rendering of a job's progress (plain text, progress bars, fixed-width tables).

Kept apart from the computation so tests can assert on the data and on the
exact text, and so the CLI, ``show_job_progress`` and ``--watch`` print the
same thing.
"""

from __future__ import annotations

from datetime import datetime, timezone


def bar(done: float, total: float, width: int = 30) -> str:
    """``[#########.........]`` for done/total (full when total is 0)."""
    frac = 1.0 if total <= 0 else max(0.0, min(1.0, done / total))
    n = int(round(frac * width))
    return "[" + "#" * n + "." * (width - n) + "]"


def _t(ts: float | None) -> str:
    return datetime.fromtimestamp(ts, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ") if ts else "-"


def _dur(s: float | None) -> str:
    if s is None:
        return "-"
    s = float(s)
    if s < 60:
        return f"{s:.1f}s"
    m, sec = divmod(int(s), 60)
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m{sec:02d}s" if h else f"{m}m{sec:02d}s"


def describe_event(e: dict) -> str:
    """One event as one short line."""
    parts = [
        datetime.fromtimestamp(e.get("timestamp", 0), tz=timezone.utc).strftime("%H:%M:%S"),
        e.get("event_type", "?"),
    ]
    if "partition_id" in e:
        parts.append(f"p{e['partition_id']}")
    if "op_index" in e:
        parts.append(f"op{e['op_index']} {e.get('op_name', '')}".rstrip())
    if "input_rows" in e and "output_rows" in e:
        parts.append(f"{e['input_rows']}->{e['output_rows']} rows")
    elif "input_rows" in e or "output_rows" in e:
        parts.append(f"{e.get('input_rows', e.get('output_rows'))} rows")
    if e.get("duration") is not None:
        parts.append(f"{float(e['duration']):.3f}s")
    if e.get("status") and e.get("event_type") not in ("op_start", "partition_start"):
        parts.append(str(e["status"]))
    if e.get("try_number") is not None:
        parts.append(f"try {e['try_number']}")
    if e.get("error_message"):
        parts.append(f"error: {str(e['error_message'])[:160]}")
    return " ".join(str(p) for p in parts)


def _partition_line(p: dict, n_ops: int, width: int) -> str:
    rows = f"rows {p.get('start_row', '?')}-{int(p.get('end_row', 1)) - 1}"
    done = min(p.get("ops_done", 0), n_ops)
    line = f"  p{p['partition_id']:<4} {rows:<18} {bar(done, n_ops, width // 2)} {done}/{n_ops} ops  {p.get('status', '?')}"
    if p.get("current_op"):
        c = p["current_op"]
        line += f": op {c['op_index']} {c['op_name']} ({c.get('input_rows', '?')} rows, {c['since_s']}s)"
    if p.get("output_rows") is not None:
        line += f"  {p.get('input_rows')} -> {p['output_rows']} rows"
    if p.get("error"):
        line += f"  error: {str(p['error'])[:160]}"
    return line


def _op_table(ops: list[dict], n_parts: int) -> list[str]:
    head = (
        f"  {'op':>3} {'name':<34} {'parts':>7} {'in':>10} {'out':>10} {'filtered':>9} {'dup':>8} {'failed':>7} "
        f"{'time':>9} {'rows/s':>10}"
    )
    lines = [head]
    for o in ops:
        rps = o.get("rows_per_s")
        lines.append(
            f"  {o['op_index']:>3} {str(o.get('op_name', ''))[:34]:<34} "
            f"{o.get('partitions_done', n_parts):>3}/{n_parts:<3} {o['rows_in']:>10,} {o['rows_out']:>10,} "
            f"{o['filtered']:>9,} {o['duplicates']:>8,} {o['failed']:>7,} {_dur(o.get('duration_s')):>9} "
            f"{(f'{rps:,.0f}' if rps else '-'):>10}"
        )
    return lines


def _partition_op_matrix(parts: list[dict], n_ops: int) -> list[str]:
    """Rows out after each op, per partition ('.' = not done yet)."""
    lines = [
        "  rows out per partition after each op ('.' = not done):",
        "  " + f"{'part':<6}" + "".join(f"{'op' + str(i):>9}" for i in range(n_ops)),
    ]
    for p in parts:
        acct = p.get("accounting") or []
        cells = [f"{acct[i]['rows_out']:>9,}" if i < len(acct) else f"{'.':>9}" for i in range(n_ops)]
        lines.append("  " + f"p{p['partition_id']:<5}" + "".join(cells))
    return lines


def render_progress(prog: dict, *, detailed: bool = False, width: int = 30, max_partitions: int = 50) -> str:
    """A job's progress as text: the job, its progress and failures, how it ended, its partitions (at
    most ``max_partitions``, only unfinished ones when there are more) and, ``detailed``, per-op tables."""
    n_ops = len(prog.get("ops") or [])
    parts = prog.get("partitions") or []
    lines = _summary_lines(prog, parts, width)
    lines += _outcome_lines(prog)
    lines += _detail_lines(prog, parts, n_ops, detailed=detailed, width=width, max_partitions=max_partitions)
    return "\n".join(lines)


def _summary_lines(prog: dict, parts: list[dict], width: int) -> list[str]:
    """The job, its times and input, the progress bar, this run's rate and the failure counts."""
    lines = [
        f"Job {prog['job_id']}  [{prog['status'].upper()}]"
        + (f"  project {prog['project_name']}" if prog.get("project_name") else "")
    ]
    lines.append(f"  dir: {prog['job_dir']}")
    lines.append(
        f"  started {_t(prog.get('start_time'))}"
        + (f", ended {_t(prog['end_time'])}" if prog.get("end_time") else "")
        + f", duration {_dur(prog.get('duration_s'))}"
    )
    if prog.get("note"):
        lines.append(f"  note: {prog['note']}")
    inp = prog.get("input") or {}
    if inp:
        lines.append(
            f"  input: {inp.get('total_rows', 0):,} rows in {inp.get('partitions', 0)} partitions "
            f"({inp.get('dataset_path')})"
        )
    done_parts = sum(1 for p in parts if p.get("status") == "completed")
    lines.append(
        f"Progress {bar(prog['units_done'], prog['units_total'], width)} "
        f"{(100.0 * prog['units_done'] / prog['units_total']) if prog['units_total'] else 100.0:5.1f}%  "
        f"{prog['units_done']}/{prog['units_total']} op x partition steps, "
        f"{done_parts}/{len(parts)} partitions complete"
    )
    rate = f"{prog['rows_per_s']:,.0f} rows/s" if prog.get("rows_per_s") else "- rows/s"
    eta = f", ETA {_dur(prog['eta_s'])}" if prog.get("eta_s") is not None else ""
    lines.append(
        f"  this run: {prog['rows_processed_this_run']:,} rows through ops in {_dur(prog['run_elapsed_s'])}, "
        f"{rate}{eta}"
    )
    n_failed_parts = sum(1 for p in parts if p.get("status") == "failed")
    lines.append(
        f"  failures: {n_failed_parts} partitions failed, {prog.get('failed_samples', 0):,} failed samples"
        + (f", {len(prog['accounting_errors'])} accounting errors" if prog.get("accounting_errors") else "")
    )
    return lines


def _outcome_lines(prog: dict) -> list[str]:
    """The error, a stop request, the export, reuse across jobs and (for an unfinished job) how to resume."""
    lines: list[str] = []
    if prog.get("error"):
        lines.append(f"  error: {prog['error']}")
    if prog.get("stop_request"):
        sr = prog["stop_request"]
        lines.append(
            f"  stop requested by {sr.get('requested_by')} at {sr.get('requested_at')}"
            + (" (force)" if sr.get("force") else "")
        )
    exp = prog.get("export") or {}
    if exp.get("written"):
        lines.append(
            f"  export: {exp.get('rows', 0):,} rows -> {exp.get('path')} (xxh3 {exp.get('checksum_xxh3_128')})"
        )
    reuse = prog.get("reuse")
    if reuse and reuse.get("off"):
        lines.append(f"  reuse: off: {reuse['off']}")
    elif reuse:  # nightly reuse across jobs (docs/nightly.md)
        lines.append(
            f"  reuse: {reuse['partitions_reused']} partitions reused, {reuse['computed_partitions']} computed, "
            f"{reuse['checkpoints_reused']} checkpoints ({reuse['bytes_reused']:,} bytes) from "
            f"{', '.join(reuse['source_jobs']) or 'no earlier job'}"
        )
    if prog["status"] in ("failed", "stopped", "interrupted") and prog.get("resume_command"):
        lines.append(f"  resume: {prog['resume_command']}")
    return lines


def _detail_lines(
    prog: dict, parts: list[dict], n_ops: int, *, detailed: bool, width: int, max_partitions: int
) -> list[str]:
    """The partitions' lines, the per-op tables when ``detailed``, the last failures and events."""
    lines: list[str] = []
    if parts:
        lines.append("Partitions:")
        shown = (
            parts
            if len(parts) <= max_partitions
            else [p for p in parts if p.get("status") != "completed"][:max_partitions]
        )
        lines += [_partition_line(p, n_ops, width) for p in shown]
        if len(shown) < len(parts):
            lines.append(f"  ... {len(parts) - len(shown)} more partitions not shown")
    if detailed and prog.get("ops"):
        lines.append("Ops:")
        lines += _op_table(prog["ops"], len(parts))
        if parts and len(parts) <= max_partitions:
            lines += _partition_op_matrix(parts, n_ops)
    if prog.get("failures"):
        lines.append("Failures:")
        lines += ["  " + describe_event(e) for e in prog["failures"][-5:]]
    n_last = 20 if detailed else 8
    if prog.get("last_events"):
        lines.append("Last events:")
        lines += ["  " + describe_event(e) for e in prog["last_events"][-n_last:]]
    return lines
