"""A new job's input planned: its checks and its partitions, by tasks wherever the caller has cores.

``plan_input`` is what a new job reads of its input before anything is written: the fields the recipe
reads in a sample of rows (engine/input/schema.py), every row indexed and every partition hashed
(engine/input/partitioning.py, by tasks over ``run_tasks``), and each partition checked to fit a worker.
``prepare_job`` calls it in its process by default (tasks on this machine's threads); a caller with
another place to plan passes its own ``InputPlanner`` (the validate task on a Ray cluster: Ray tasks).
"""

from __future__ import annotations

import logging
import time
from typing import Callable

from airflow_provider_dj import settings
from airflow_provider_dj.core import fs as storage
from airflow_provider_dj.engine.input.partition_memory import PartitionTooLargeError
from airflow_provider_dj.engine.input.partitioning import PartitioningError, plan_partitions
from airflow_provider_dj.engine.input.sources import InputError
from airflow_provider_dj.engine.input.task_map import RunTasks, run_on_threads

log = logging.getLogger(__name__)

Say = Callable[[str], None]
#: ``(recipe, say) -> partitioning_info``: how a new job's input is planned.
InputPlanner = Callable[[object, Say], dict]
#: What ``plan_input`` raises for input the recipe cannot run: a retry would be refused the same way.
PLAN_REFUSALS = (InputError, PartitionTooLargeError, PartitioningError)


def plan_input(recipe, say: Say | None = None, run_tasks: RunTasks = run_on_threads) -> dict:
    """The checked partitioning_info of ``recipe``'s input (nothing written).  Raises InputError (a field
    the recipe reads in no row, bytes that are not UTF-8, a line that is not an object) or
    PartitionTooLargeError (a partition no worker could hold)."""
    from airflow_provider_dj.engine.input.partition_memory import check_partitions_fit

    say = say or log.info
    check_input_against_recipe(recipe, say)  # a field the recipe reads missing from every row: refused here
    from airflow_provider_dj.engine.input.media import MediaKeys

    keys = MediaKeys.of_recipe(recipe)  # image_key/audio_key/video_key: media files are part of the job
    info = plan_partitions(recipe.dataset_path, recipe.partition, input_index_cache(recipe), run_tasks, keys)
    check_partitions_fit(info)  # a partition no worker could hold: refused before anything is written
    return info


def check_input_against_recipe(recipe, say: Say | None = None):
    """The input check of engine/input/schema.py: raises InputMismatchError (nothing written) when a
    field the recipe reads is in no row; logs the files that lack one, or have no rows."""
    from airflow_provider_dj.engine.input.schema import check_input_fields

    say = say or log.info
    t0 = time.perf_counter()
    check = check_input_fields(recipe)
    say(
        f"input check: the {check.files} input file(s) hold the field(s) the recipe reads "
        f"({', '.join(check.fields) or 'none'}) ({time.perf_counter() - t0:.2f}s)"
    )
    for warning in check.warnings:
        say(f"input warning: {warning}")
    return check


def input_index_cache(recipe):
    """Reuse across jobs on a local work dir: planning skips re-reading unchanged input files
    (engine/input/index_cache.py says why their stat can stand in for their bytes)."""
    if not recipe.intermediate_storage.reuse_across_jobs or storage.is_url(recipe.work_dir):
        return None
    if not settings.get("input_index_cache"):
        return None
    from airflow_provider_dj.engine.input.index_cache import InputIndexCache
    from airflow_provider_dj.engine.jobdir.layout import input_index_cache_dir

    return InputIndexCache(input_index_cache_dir(recipe.work_dir))


__all__ = ["PLAN_REFUSALS", "InputPlanner", "check_input_against_recipe", "input_index_cache", "plan_input"]
