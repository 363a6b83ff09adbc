"""Start a new job or re-attach to an existing one — the engine side of the `validate` task.

A new job: validate the effective recipe, check the input exists, plan
partitions (scan + hash), and write the effective config, the partitioning
info and the execution plan into the job directory.

An existing job directory (a retried/cleared run, or an explicit resume):
never re-plan and never delete.  Check the recipe still describes the same
computation and that every partition's content hash still matches the
input; refuse with a specific message otherwise, leaving the job directory
untouched (invariant 7).
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass

from airflow_provider_dj.engine import storage
from airflow_provider_dj.engine.events import EventLog
from airflow_provider_dj.engine.job import (
    EFFECTIVE_CONFIG,
    EXECUTION_PLAN,
    PARTITIONING_INFO,
    JobPaths,
    read_json,
    validate_job_id,
    write_json,
)
from airflow_provider_dj.engine.partitioning import plan_partitions
from airflow_provider_dj.engine.plan import build_plan, execution_groups

log = logging.getLogger(__name__)

# Keys whose change alters the rows a job produces: a resume across such a
# change would mix two computations, so it is refused.
RESULT_KEYS = ("dataset_path", "process", "text_keys", "skip_op_error")


class ResumeRefusedError(RuntimeError):
    """Continuing this job would be wrong; nothing in the job directory was changed."""


@dataclass
class PreparedJob:
    job_id: str
    job_dir: str
    groups: list[dict]
    resumed: bool
    num_partitions: int
    total_rows: int

    def to_dict(self) -> dict:
        return self.__dict__.copy()


def _config_diff(old: dict, new: dict) -> list[str]:
    lines = []
    for key in RESULT_KEYS:
        if json.dumps(old.get(key), sort_keys=True, default=str) != json.dumps(new.get(key), sort_keys=True, default=str):
            lines.append(f"  {key}: {json.dumps(old.get(key), default=str)} -> {json.dumps(new.get(key), default=str)}")
    return lines


def _verify_existing(recipe, paths: JobPaths, info: dict, events: EventLog) -> None:
    from airflow_provider_dj.engine.partitioning import InputChangedError
    from airflow_provider_dj.engine.partitioning import read_partition

    old_cfg = read_json(paths.path(EFFECTIVE_CONFIG))
    diff = _config_diff(old_cfg, recipe.to_dict())
    if diff:
        raise ResumeRefusedError(
            f"job {paths.job_id}: the recipe changed in keys that affect results:\n" + "\n".join(diff)
            + "\nRevert them to resume, or start a new job (omit job_id/resume)."
        )
    new_cfg = recipe.to_dict()
    if json.dumps(old_cfg.get("partition"), sort_keys=True) != json.dumps(new_cfg.get("partition"), sort_keys=True):
        log.warning("job %s: partition settings differ from the ones it was planned with; the saved %d "
                    "partition boundaries are used", paths.job_id, len(info["partitions"]))
    events.emit("validation_step", step="config_matches", status="ok")
    for part in info["partitions"]:
        try:
            read_partition(info, part["partition_id"], verify_hash=True)
        except (InputChangedError, FileNotFoundError) as exc:
            raise ResumeRefusedError(f"job {paths.job_id}: {exc}") from exc
    events.emit("validation_step", step="partition_hashes_match", status="ok", partitions=len(info["partitions"]))


def prepare_job(recipe, *, job_id: str, group_size: int = 1, event_defaults: dict | None = None) -> PreparedJob:
    """``recipe`` is the effective engine.recipe.Recipe (overrides applied)."""
    from airflow_provider_dj.engine.recipe import check_input_exists

    validate_job_id(job_id)
    paths = JobPaths(recipe.work_dir, job_id)
    events = EventLog(paths.job_dir, job_id, defaults=event_defaults)
    info_path = paths.path(PARTITIONING_INFO)
    plan = build_plan(recipe)  # validates op names again, cheaply
    if storage.exists(info_path):
        info = read_json(info_path)
        log.info("job %s exists in %s: verifying before resuming", job_id, paths.job_dir)
        _verify_existing(recipe, paths, info, events)
        resumed = True
    else:
        if recipe.resume:
            raise ResumeRefusedError(
                f"resume={recipe.resume!r}: no job directory with partitioning info at {paths.job_dir}; "
                f"check the token and work_dir"
            )
        check_input_exists(recipe)
        t0 = time.perf_counter()
        info = plan_partitions(recipe.dataset_path, recipe.partition)
        storage.makedirs(paths.job_dir)
        cfg = recipe.to_dict()
        cfg["job_id"] = job_id
        write_json(paths.path(EFFECTIVE_CONFIG), cfg)
        write_json(info_path, info)
        events.emit("plan_created", partitions=info["num_partitions"], input_rows=info["total_rows"],
                    duration=round(time.perf_counter() - t0, 6), how=info["how_chosen"])
        log.info("planned %d partitions over %d rows (%s) in %.2fs", info["num_partitions"], info["total_rows"],
                 info["how_chosen"], time.perf_counter() - t0)
        resumed = False
    groups = execution_groups(info, group_size) if info["partitions"] else []
    plan.groups = groups
    write_json(paths.path(EXECUTION_PLAN), plan.to_dict())
    return PreparedJob(job_id, paths.job_dir, groups, resumed, info["num_partitions"], info["total_rows"])
