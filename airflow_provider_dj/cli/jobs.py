"""``dj-airflow`` commands that manage jobs: unlock, gc, stop, jobs, monitor, why, ray-stop.

They read and write job directories (and the embedded Ray head's state file) and never
start Airflow, so each answers in about a second; ``cli/main.py`` keeps ``run`` and ``validate``
and the argument parser that dispatches to these.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from airflow_provider_dj import settings


def cmd_unlock(args: argparse.Namespace) -> int:
    from airflow_provider_dj.engine.jobdir import lock as job_lock
    from airflow_provider_dj.engine.jobdir.identity import JobIdError, validate_job_id

    try:
        validate_job_id(args.job_id)
    except JobIdError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from airflow_provider_dj.core import fs as storage

    job_dir = storage.join(args.work_dir or settings.get("work_dir") or ".", args.job_id)
    lock = job_lock.force_unlock(job_dir)
    print(f"removed the runner lock of {job_dir} ({job_lock.describe(lock)})" if lock else f"{job_dir} has no lock")
    return 0


def cmd_gc(args: argparse.Namespace) -> int:
    """Delete old completed jobs' checkpoints in a work dir, never a running, resumable or referenced job's."""
    from airflow_provider_dj.engine.job.gc import collect

    work_dir = args.work_dir or settings.get("work_dir") or "."
    keep = args.keep_last_n_jobs if args.keep_last_n_jobs is not None else settings.get("gc_keep_last_n_jobs")
    budget = args.max_bytes if args.max_bytes is not None else settings.get("gc_max_bytes")
    res = collect(work_dir, keep_last_n_jobs=keep, max_bytes=budget, dry_run=args.dry_run)
    verb = "would delete" if args.dry_run else "deleted"
    for d in res.deleted:
        print(f"{verb} the checkpoints of job {d['job_id']} ({d['status']}): {d['bytes']} bytes")
    for k in res.kept:
        print(f"kept job {k['job_id']} ({k['why']}): {k['bytes']} bytes")
    print(
        f"{verb} {len(res.deleted)} jobs' checkpoints, {'would free' if args.dry_run else 'freed'} "
        f"{res.freed_bytes} bytes; {res.index_entries_removed} reuse-index entries "
        f"{'would be ' if args.dry_run else ''}removed"
    )
    return 0


def cmd_stop(args: argparse.Namespace) -> int:
    from airflow_provider_dj.client.control import JobNotFoundError, stop_job
    from airflow_provider_dj.engine.jobdir.identity import JobIdError

    try:
        res = stop_job(
            args.job_id,
            force=args.force,
            timeout=args.timeout,
            work_dir=args.work_dir,
            requested_by=f"dj-airflow stop (pid {os.getpid()})",
            ray_address=getattr(args, "ray_address", None),
        )
    except (JobIdError, JobNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{res.state}: {res.message}")
    _print_ray_stops(res.ray_jobs)
    return 0 if res.state in ("stopped", "completed", "not_running") or args.timeout == 0 else 1


def _print_ray_stops(stops: list[dict]) -> None:
    """Ray Jobs mode: one line per group's Ray Job; the ones Ray could not be asked to stop on stderr,
    with why, and that the stop request in the job directory stays for their drivers."""
    if not stops:
        return
    from airflow_provider_dj.hooks.ray_jobs_stop import RayJobStop

    for stop in [RayJobStop(**d) for d in stops]:
        print(stop.line(), file=sys.stderr if stop.outcome == "not_stopped" else sys.stdout)
    missed = sum(1 for s in stops if s["outcome"] == "not_stopped")
    if missed:
        print(
            f"warning: {missed} Ray job(s) could not be stopped through Ray; the stop request stays in the job "
            f"directory and their drivers stop at their next committed boundary",
            file=sys.stderr,
        )


def cmd_jobs(args: argparse.Namespace) -> int:
    from airflow_provider_dj.client.control import list_jobs

    jobs = list_jobs(args.work_dir, running_only=not args.all)
    if args.json:
        print(json.dumps(jobs, indent=2, default=str))
        return 0
    if not jobs:
        print("no running jobs" if not args.all else "no jobs")
        return 0
    print(f"{'JOB ID':<32} {'STATUS':<10} {'PROGRESS':<18} DIR")
    for j in jobs:
        p = j["progress"]
        prog = f"{p['partitions_final']}/{p['partitions_total']} ({p['percent']:.0f}%)" if p else "-"
        print(f"{j['job_id']:<32} {j['status']:<10} {prog:<18} {j['job_dir']}")
    return 0


def cmd_monitor(args: argparse.Namespace) -> int:
    from airflow_provider_dj.client.monitor import JobNotFoundError, show_job_progress, watch_job
    from airflow_provider_dj.engine.jobdir.identity import JobIdError

    try:
        if args.watch:
            frames = watch_job(
                args.job_id,
                interval=args.interval,
                max_iterations=args.max_iterations,
                detailed=args.detailed,
                work_dir=args.work_dir,
            )
            return 0 if frames else 1
        show_job_progress(args.job_id, detailed=args.detailed, work_dir=args.work_dir)
    except (JobIdError, JobNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 0


def cmd_ray_stop(args: argparse.Namespace) -> int:
    from airflow_provider_dj.hooks.ray import stop_local_head

    print("stopped the embedded Ray head" if stop_local_head() else "no embedded Ray head recorded")
    return 0


def cmd_why(args: argparse.Namespace) -> int:
    """One input row's path through the recipe, op by op (engine/observe/why.py: lineage, then failed
    samples, then the tracer, the look-up the job view and the Python API use)."""
    from airflow_provider_dj.engine.job.status import JobNotFoundError, resolve_job_dir
    from airflow_provider_dj.engine.jobdir.identity import JobIdError
    from airflow_provider_dj.engine.observe.why import RowNotFoundError, RowOutOfRangeError, explain

    try:
        job_dir = resolve_job_dir(args.job_id, args.work_dir)
        answers = explain(job_dir, input_row=args.row, export_row=args.export_row, where=args.where)
    except (JobIdError, JobNotFoundError, RowNotFoundError, RowOutOfRangeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps([a.get("path") or a for a in answers], indent=2, default=str, ensure_ascii=False))
        return 0
    for a in answers:
        print(_render_path(a["path"]) if "path" in a else _render_answer(a))
    return 0


def _render_answer(a: dict) -> str:
    """A row answered without lineage (failed samples or the tracer): its fate, op and reason."""
    head = f"input row {a['input_row']} ({a['partition_label']}): {a['fate']}"
    if a.get("op_name"):
        head += f" at op {a['op_index']} {a['op_name']}"
    return head + f"\n  {a['reason']}" + (f"\n  (from {a['source']})" if a.get("source") else "")


def _render_path(p: dict) -> str:
    """A row's lineage path (``RowPath.to_dict()``), one line per op."""
    head = f"input row {p['input_row']} ({p['partition_label']}): {p['fate']}"
    if p["export_row"] is not None:
        head += f", export row {p['export_row']}"
    lines = [head + (f" ({p['note']})" if p["note"] else "")]
    for s in p["steps"]:
        line = f"  op {s['op_index']} {s['op_name']} [{s['kind']}]: {s['fate']}"
        if s["reason"]:
            line += f": {s['reason']}"
        lines.append(line)
        if s["fate"] == "changed":
            if s["before"] is None and s["after"] is None:
                lines.append("      (the text before/after is no longer in the checkpoints)")
            else:
                lines.append(f"      before: {s['before']!r}")
                lines.append(f"      after:  {s['after']!r}")
    return "\n".join(lines)


def add_why_parser(sub) -> None:
    """``dj-airflow why``'s arguments (called from cli.build_parser, which keeps the other commands)."""
    why = sub.add_parser("why", help="show an input row's fate, op by op (kept, changed, filtered, duplicate, failed)")
    why.add_argument("job_id")
    which = why.add_mutually_exclusive_group(required=True)
    which.add_argument("--row", type=int, metavar="N", help="input row N (0-based, in input order)")
    which.add_argument("--export-row", type=int, metavar="N", help="the input row behind export row N (0-based)")
    which.add_argument("--where", metavar="FIELD=VALUE", help="every input row whose FIELD equals VALUE (as text)")
    why.add_argument("--work-dir", help="the recipe's work_dir (default: $DJ_WORK_DIR, then the recent-jobs registry)")
    why.add_argument("--json", action="store_true", help="machine-readable output")
    why.set_defaults(func=cmd_why)
