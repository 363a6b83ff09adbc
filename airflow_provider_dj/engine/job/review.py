"""The review gate before export: which of the recipe's ``review:`` bounds a job crossed, and what a
person needs to decide (docs/review_gate.md).

``decide_review(job_dir)`` reads the job's per-op funnel (the summary's per-op totals, built from the
checkpoint markers) and the funnel of the previous successful job of the same recipe in the same work
dir, and returns a :class:`Review`: the bounds crossed (none: the export goes ahead at once), both
funnels, a few removed rows per crossed op with their "why" (engine/observe/why.py) and the job view
link.  It records a ``review_decided`` event; ``record_answer`` records the person's answer
(``review_answered``).  The DAG's review task, ``run_job``'s gate and ``dj-airflow run`` all call these.
Nothing here deletes or changes a checkpoint: a rejected job keeps them, so a fixed recipe resumes it.
"""

from __future__ import annotations

import io
import logging
import os
from dataclasses import asdict, dataclass, field

import numpy as np

from airflow_provider_dj.core import fs as storage
from airflow_provider_dj.core import terminal
from airflow_provider_dj.core.errors import DJError
from airflow_provider_dj.engine.config.schema import ReviewConfig
from airflow_provider_dj.engine.job.summary import build_job_summary, read_job_summary
from airflow_provider_dj.engine.jobdir.events import EventLog
from airflow_provider_dj.engine.jobdir.identity import resume_command
from airflow_provider_dj.engine.jobdir.layout import JOB_SUMMARY, REVIEW_BOUNDS, read_json, write_json
from airflow_provider_dj.engine.storage.context import JobContext

log = logging.getLogger(__name__)

APPROVED, REJECTED, TIMED_OUT = "approved", "rejected", "timed_out"


class ReviewRejectedError(DJError, RuntimeError):
    """The review gate stopped the job before export; its checkpoints are kept for a resume."""


@dataclass
class Review:
    """What the gate decided for one job, as plain values (an XCom, a JSON event, a terminal prompt)."""

    job_id: str
    crossed: list[dict]  # one per bound crossed: op_index, op_name, bound, limit, value, previous
    funnel: list[dict]  # per op: op_index, op_name, rows_in, rows_out, removed, removed_fraction
    previous_job_id: str | None = None
    previous_funnel: list[dict] = field(default_factory=list)
    samples: list[dict] = field(default_factory=list)  # removed rows of crossed ops, with their why
    job_view_url: str | None = None
    resume_command: str = ""
    timeout_s: float | None = None
    on_timeout: str = "reject"

    @property
    def needs_review(self) -> bool:
        return bool(self.crossed)

    def to_dict(self) -> dict:
        return asdict(self)

    def headline(self) -> str:
        """One line naming every bound crossed."""
        return "; ".join(_crossed_line(c) for c in self.crossed) or "no review bound crossed"


def _crossed_line(c: dict) -> str:
    if c["bound"] == "max_removed_fraction":
        return (
            f"op {c['op_index']} {c['op_name']} removed {c['value']:.1%} of its input "
            f"(review.max_removed_fraction {c['limit']:.1%})"
        )
    return (
        f"op {c['op_index']} {c['op_name']} removed {c['value']:.1%}, {c['previous']:.1%} in job "
        f"{c['previous_job_id']} (review.max_removed_change {c['limit']:.1%})"
    )


def funnel_of(summary: dict) -> list[dict]:
    """The per-op funnel of a job summary: rows in, out, removed and the removed fraction."""
    out = []
    for op in summary.get("ops") or []:
        rows_in, rows_out = int(op.get("rows_in", 0)), int(op.get("rows_out", 0))
        removed = rows_in - rows_out
        out.append(
            {
                "op_index": op["op_index"],
                "op_name": op["op_name"],
                "rows_in": rows_in,
                "rows_out": rows_out,
                "removed": removed,
                "removed_fraction": round(removed / rows_in, 6) if rows_in else 0.0,
            }
        )
    return out


def previous_successful_job(job_dir: str, project_name: str) -> dict | None:
    """The summary of the latest completed job of ``project_name`` in ``job_dir``'s work dir (not this job):
    the one the project's pointer names (job/project_index.py) when it checks out, else a scan."""
    from airflow_provider_dj.engine.job.project_index import latest_completed

    work_dir, me = storage.dirname(job_dir), storage.basename(job_dir)
    named = latest_completed(work_dir, project_name)
    if named and named != me:
        summary = _completed_summary_of(storage.join(work_dir, named), project_name)
        if summary is not None:
            return summary
    best = None
    for name in storage.listdir(work_dir):
        if name == me or name.startswith(("_", ".")) or not storage.exists(storage.join(work_dir, name, JOB_SUMMARY)):
            continue
        summary = _completed_summary_of(storage.join(work_dir, name), project_name)
        if summary is None:
            continue
        if best is None or float(summary.get("end_time") or 0) > float(best.get("end_time") or 0):
            best = summary
    return best


def _completed_summary_of(job_dir: str, project_name: str) -> dict | None:
    """The job's summary when it is a completed job of ``project_name``, else None (unreadable included)."""
    try:
        summary = read_job_summary(job_dir)
    except (OSError, ValueError):
        return None
    if not summary or summary.get("status") != "completed" or summary.get("project_name") != project_name:
        return None
    return summary


def crossed_bounds(review_cfg, funnel: list[dict], previous: dict | None) -> list[dict]:
    """The bounds of ``review_cfg`` (a ``ReviewConfig``) that ``funnel`` crosses, in op order.

    ``previous``: the previous successful job's summary (None: the change bound is not checked)."""
    before = {(p["op_index"], p["op_name"]): p for p in funnel_of(previous)} if previous else {}
    out = []
    for op in funnel:
        frac = op["removed_fraction"]
        base = {"op_index": op["op_index"], "op_name": op["op_name"], "value": frac}
        limit = review_cfg.max_removed_fraction
        if limit is not None and frac > limit:
            out.append({**base, "bound": "max_removed_fraction", "limit": limit})
        prev = before.get((op["op_index"], op["op_name"]))
        limit = review_cfg.max_removed_change
        if limit is not None and prev is not None and abs(frac - prev["removed_fraction"]) > limit:
            out.append(
                {
                    **base,
                    "bound": "max_removed_change",
                    "limit": limit,
                    "previous": prev["removed_fraction"],
                    "previous_job_id": previous.get("job_id"),
                }
            )
    return out


def removed_samples(job_dir: str, op_index: int, limit: int) -> list[dict]:
    """Up to ``limit`` input rows op ``op_index`` removed, each with its why (engine/observe/why.py);
    [] when the job records no lineage."""
    from airflow_provider_dj.engine.observe.lineage_query import REMOVED, JobLineage
    from airflow_provider_dj.engine.observe.why import why_row

    if limit <= 0:
        return []
    rows: list[int] = []
    try:
        jl = JobLineage(job_dir)
        for part in JobContext(job_dir).partitioning_info["partitions"]:
            t = jl.of(part["partition_id"]).table
            ops, fates = t.column("op_index").to_numpy(), t.column("fate").to_numpy()
            hit = t.column("input_row").to_numpy()[(ops == op_index) & np.isin(fates, REMOVED)]
            rows.extend(int(r) for r in np.sort(hit)[: limit - len(rows)])
            if len(rows) >= limit:
                break
    except (OSError, LookupError, ValueError, KeyError) as exc:
        log.info("review: no removed-row samples for op %s: %s", op_index, exc)
        return []
    out = []
    for row in rows:
        answer = why_row(job_dir, row)
        out.append({k: answer.get(k) for k in ("input_row", "fate", "op_index", "op_name", "reason", "sample")})
    return out


def decide_review(job_dir: str, *, job_view_url: str | None = None, event_defaults: dict | None = None) -> Review:
    """Check the recipe's ``review:`` bounds against this job's funnel; record a ``review_decided`` event.

    A recipe without ``review:`` gets an empty Review (nothing crossed) and no event.  Reads only."""
    ctx = JobContext(job_dir)
    recipe = ctx.recipe
    cfg = load_bounds(job_dir, recipe)
    review = Review(job_id=ctx.job_id, crossed=[], funnel=[], job_view_url=job_view_url)
    if cfg is None:
        return review
    review.funnel = funnel_of(build_job_summary(job_dir, "running"))
    previous = previous_successful_job(job_dir, recipe.project_name)
    if previous:
        review.previous_job_id = previous.get("job_id")
        review.previous_funnel = funnel_of(previous)
    review.crossed = crossed_bounds(cfg, review.funnel, previous)
    review.timeout_s, review.on_timeout = cfg.timeout_s, cfg.on_timeout
    review.resume_command = resume_command(recipe.source_file, ctx.job_id)
    for op_index in dict.fromkeys(c["op_index"] for c in review.crossed):
        review.samples.extend(removed_samples(job_dir, op_index, cfg.sample_rows))
    EventLog(job_dir, ctx.job_id, defaults=event_defaults).emit(
        "review_decided",
        status="review" if review.crossed else "pass",
        crossed=review.crossed,
        previous_job_id=review.previous_job_id,
    )
    return review


def write_bounds(job_dir: str, recipe) -> None:
    """Record the recipe's ``review:`` bounds (null: no gate) in the job directory; every validate does,
    new job and resume, so a rejected job resumed with a raised bound is checked against the new one."""
    bounds = recipe.review.to_dict() if recipe.review is not None else None
    write_json(storage.join(job_dir, *REVIEW_BOUNDS.split("/")), {"review": bounds})


def load_bounds(job_dir: str, recipe) -> ReviewConfig | None:
    """The bounds the latest validate recorded; the job's own recipe's where none is recorded."""
    path = storage.join(job_dir, *REVIEW_BOUNDS.split("/"))
    if not storage.exists(path):
        return recipe.review
    bounds = read_json(path).get("review")
    return ReviewConfig(**bounds) if bounds is not None else None


def record_answer(job_dir: str, answer: str, *, by: str | None = None, event_defaults: dict | None = None) -> None:
    """Record the review's answer (``approved``, ``rejected`` or ``timed_out``) as a ``review_answered`` event."""
    if answer not in (APPROVED, REJECTED, TIMED_OUT):
        raise ValueError(f"answer must be one of {APPROVED}, {REJECTED}, {TIMED_OUT}; got {answer!r}")
    job_id = JobContext(job_dir).job_id
    EventLog(job_dir, job_id, defaults=event_defaults).emit("review_answered", status=answer, responded_by=by)


def rejection_message(review: Review, answer: str) -> str:
    """The error a rejected (or timed-out) review fails the job with: the bounds crossed and how to resume."""
    what = "timed out (review.on_timeout: reject)" if answer == TIMED_OUT else answer
    return (
        f"review {what} before export of job {review.job_id}: {review.headline()}. Nothing was exported and "
        f"the checkpoints are kept: fix the recipe (or its review: bounds) and resume with: {review.resume_command}"
    )


def render_markdown(review: Review) -> str:
    """The review as Markdown: the HITL task's body and the terminal prompt."""
    lines = ["**Bounds crossed**", ""]
    lines += [f"- {_crossed_line(c)}" for c in review.crossed]
    before = {(p["op_index"], p["op_name"]): p for p in review.previous_funnel}
    prev_head = f"job {review.previous_job_id}" if review.previous_job_id else "no previous successful job"
    lines += ["", f"**Funnel: this job against {prev_head}**", ""]
    lines += ["| op | rows in | rows out | removed | previous removed |", "|---|---:|---:|---:|---:|"]
    for op in review.funnel:
        prev = before.get((op["op_index"], op["op_name"]))
        shown = f"{prev['removed_fraction']:.1%}" if prev else "-"
        lines.append(
            f"| {op['op_index']} {op['op_name']} | {op['rows_in']} | {op['rows_out']} | "
            f"{op['removed']} ({op['removed_fraction']:.1%}) | {shown} |"
        )
    if review.samples:
        lines += ["", "**Removed rows and why**", ""]
        for s in review.samples:
            text = str((s.get("sample") or {}).get("text", ""))[:120].replace("\n", " ").replace("|", "\\|")
            lines.append(f"- input row {s['input_row']} ({s['fate']} by {s['op_name']}): {s['reason']} — `{text}`")
    if review.job_view_url:
        lines += ["", f"[Data-Juicer job view]({review.job_view_url})"]
    lines += ["", f"Reject keeps the checkpoints; resume with `{review.resume_command}`."]
    return "\n".join(lines)


def render_for_terminal(review: Review, width: int) -> str:
    """The review's Markdown laid out for a terminal ``width`` columns wide (headings in bold, the funnel
    as a drawn table), with ANSI styles; the Markdown itself where rich is not installed."""
    try:
        from rich.console import Console
        from rich.markdown import Markdown
    except ImportError:
        return render_markdown(review) + "\n"
    buf = io.StringIO()
    Console(file=buf, force_terminal=True, width=width, color_system="standard").print(
        Markdown(render_markdown(review))
    )
    return buf.getvalue()


def _terminal_width(fd: int) -> int:
    try:
        return max(40, os.get_terminal_size(fd).columns)
    except OSError:
        return 100


def ask_on_terminal(review: Review) -> bool:
    """Show the review on the controlling terminal and ask y/N; True only for a yes.  No terminal (a
    pipe, a service) or an end of input answers no.  A live display on the terminal (``dj-airflow
    run``'s) is stopped first, wherever in this process it was started."""
    terminal.stop_display_for_prompt()
    try:
        # A descriptor, not open("/dev/tty", "r+"): a buffered read-write file needs a seekable
        # device, and a terminal is not one.
        fd = os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY)
    except OSError:
        log.warning("review: no terminal to ask on; the export is not approved")
        return False
    try:
        with open(fd, "w", encoding="utf-8", errors="replace", closefd=False) as out:
            out.write("\n" + render_for_terminal(review, _terminal_width(fd)) + "\nApprove the export? [y/N] ")
        with open(fd, "rb", buffering=0, closefd=False) as tty:
            answer = tty.readline().decode("utf-8", "replace").strip().lower()
    finally:
        os.close(fd)
    return answer in ("y", "yes")
