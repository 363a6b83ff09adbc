"""A completed job: whether a job directory holds one, and whether its export (with the media files it
names, beside it) and side outputs are still what its summary recorded (a re-run of a completed job
checks, never rewrites)."""

from __future__ import annotations

import json
import logging

import xxhash

from airflow_provider_dj.core import fs as storage
from airflow_provider_dj.engine.jobdir.layout import JOB_SUMMARY
from airflow_provider_dj.engine.output.errors import ExportMismatchError

log = logging.getLogger(__name__)


def is_job_complete(job_dir: str) -> bool:
    path = storage.join(job_dir, JOB_SUMMARY)
    if not storage.exists(path):
        return False
    try:
        return json.loads(storage.read_bytes(path)).get("status") == "completed"
    except ValueError:
        return False


def verify_completed_export(job_dir: str) -> dict:
    """Re-check a completed job's export against its summary (size and xxh3 checksum)."""
    summary = json.loads(storage.read_bytes(storage.join(job_dir, JOB_SUMMARY)))
    exp = summary["export"]
    if "shards" in exp:
        from airflow_provider_dj.engine.output.shards import verify_shard_set

        verify_shard_set(exp)
        _verify_media_copies(job_dir, summary)
        return _side_output_problems(job_dir, summary)
    # Streamed: a completed job's export may be many GB; one flipped byte anywhere changes the xxh3.
    h, n = xxhash.xxh3_128(), 0
    try:
        with storage.open_read(exp["path"]) as fh:
            for chunk in storage.iter_chunks(fh):
                h.update(chunk)
                n += len(chunk)
    except FileNotFoundError:
        raise ExportMismatchError(
            f"job {summary['job_id']} completed, but its export {exp['path']} is missing; restore it or start a new job"
        ) from None
    got = h.hexdigest()
    if n != exp["bytes"] or got != exp["checksum_xxh3_128"]:
        raise ExportMismatchError(
            f"job {summary['job_id']} completed, but its export {exp['path']} changed since "
            f"({n} bytes, xxh3 {got}; the summary recorded {exp['bytes']} bytes, xxh3 "
            f"{exp['checksum_xxh3_128']}); nothing was rewritten: restore it or start a new job"
        )
    _verify_media_copies(job_dir, summary)
    return _side_output_problems(job_dir, summary)


def _verify_media_copies(job_dir: str, summary: dict) -> None:
    """Refuse, as a changed export file is refused, a completed job whose export names a media file
    (``image_blur_mapper``'s copies in ``<export stem>_media/``) that is missing or changed since."""
    media = summary["export"].get("media")
    if not media:
        return
    from airflow_provider_dj.engine.output.media import media_copy_problems

    problems = media_copy_problems(job_dir, media)
    if problems is None:
        log.info(
            "completed job %s: exported before its media files were recorded; the copies in %s are not checked",
            summary["job_id"],
            media.get("dir"),
        )
        return
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise ExportMismatchError(
            f"job {summary['job_id']} completed, but a media file of its export {summary['export']['path']} is "
            f"not what the export placed there: {problems[0]}{more}; nothing was rewritten: restore it or start "
            f"a new job"
        )


def _side_output_problems(job_dir: str, summary: dict) -> dict:
    """Add the damage found in the job's side outputs to ``summary`` (as ``integrity_problems``)."""
    # The job's side outputs: their damage is reported with the path (the export itself is intact).
    from airflow_provider_dj.engine.jobdir.integrity import failed_file_problems
    from airflow_provider_dj.engine.observe.tracer import trace_file_problems

    problems = failed_file_problems(
        job_dir, {p["partition_id"]: p.get("accounting") or [] for p in summary.get("partitions", [])}
    ) + trace_file_problems(job_dir)
    for problem in problems:
        log.warning(
            "completed job %s: %s; this file is not trusted (nothing was rewritten)", summary["job_id"], problem
        )
    summary["integrity_problems"] = problems
    return summary
