"""The step before the first (the ``gpu_preflight`` task): measure each CUDA op on a sample.

It writes ``gpu_probe_results.json`` into the job directory, which the first
step's planner reads to size model replicas and execution groups.  A recipe
without CUDA ops skips it and renders nothing; ``gpu_preflight_enabled: false``
skips probing but then every CUDA op must carry explicit ``num_gpus``.  A
``resume`` naming a job directory that does not exist is left for the first
step to refuse: this step does not create it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Callable

from airflow_provider_dj.core import fs as storage
from airflow_provider_dj.engine.config.recipe import RecipeError
from airflow_provider_dj.engine.jobdir.layout import GPU_PROBE_REPORT
from airflow_provider_dj.engine.preflight.preflight import (
    PreflightSettings,
    cuda_ops,
    declared_num_gpus,
    op_entries_from_recipe,
    run_preflight,
)
from airflow_provider_dj.engine.runner.start import RunIdentity, choose_job_id, load_effective_recipe

if TYPE_CHECKING:
    from airflow_provider_dj.engine.config.schema import Recipe

log = logging.getLogger(__name__)


def gpu_preflight_step(
    recipe_path: str,
    overrides: dict[str, Any] | None = None,
    *,
    renderer: Callable[[], Any] | None = None,
    run: RunIdentity | None = None,
    job_id: str | None = None,
    executor: str = "auto",
    ray_client: Callable[[], Any] | None = None,
    heartbeat_s: float = 30.0,
    say: Callable[[str], None] = log.info,
    warn: Callable[[str], None] = log.warning,
) -> dict[str, Any]:
    """Probe the recipe's CUDA ops; returns a short summary (the report on disk is the source of truth).

    ``renderer`` is called for a template renderer only when the recipe has CUDA ops and templates.
    The job directory is the one the first step will use: ``job_id``, else chosen from the recipe and
    ``run`` exactly as the first step chooses it."""
    recipe = load_effective_recipe(recipe_path, overrides)
    if not cuda_ops(op_entries_from_recipe(recipe)):
        say(f"No CUDA ops in {recipe_path}: no GPU probe needed.")
        return {"gpu_ops": [], "probed": False}
    if recipe.templates and renderer is not None:
        recipe = load_effective_recipe(recipe_path, overrides, renderer=renderer())
    ops = op_entries_from_recipe(recipe)
    names = [o.name for o in cuda_ops(ops)]
    if not recipe.partition.extra.get("gpu_preflight_enabled", True):
        _require_explicit_resources(recipe, cuda_ops(ops))
        say(f"GPU preflight disabled; using the recipe's explicit resources for {names}")
        return {"gpu_ops": names, "probed": False, "skipped": True}
    job_dir = storage.join(recipe.work_dir, job_id or choose_job_id(recipe, run))
    if recipe.resume and not storage.exists(job_dir):
        warn(f"resume={recipe.resume} names no job directory at {job_dir}; not probing (validate will refuse).")
        return {"gpu_ops": names, "probed": False, "job_dir": job_dir}
    report = run_preflight(
        ops,
        PreflightSettings.from_recipe(recipe),
        job_dir,
        executor=executor,
        heartbeat_s=heartbeat_s,
        ray_client=ray_client,
        say=say,
        warn=warn,
    )
    assert report is not None
    for op in report["ops"]:
        say(
            f"{op['op_name']} (process[{op['op_index']}]): {op['rows_per_s']} rows/s, init {op['model_init_s']:.2f}s, "
            f"output ratio {op['output_ratio']:.3f}, peak {op['peak_memory_bytes']} bytes ({op['memory_source']}), "
            f"num_gpus {op['num_gpus']}" + (" (cached)" if op.get("reused") else "")
        )
    return {
        "gpu_ops": names,
        "probed": True,
        "job_dir": job_dir,
        "report": storage.join(job_dir, GPU_PROBE_REPORT),
        "device": report["device"]["kind"],
        "reused": [o["op_name"] for o in report["ops"] if o.get("reused")],
        "num_gpus": {str(o["op_index"]): o["num_gpus"] for o in report["ops"]},
    }


def _require_explicit_resources(recipe: Recipe, gpu_ops: list[Any]) -> None:
    """With probing disabled nothing measures a CUDA op, so each must say its own ``num_gpus``."""
    missing = [o for o in gpu_ops if declared_num_gpus(o) is None]
    if not missing:
        return
    o = missing[0]
    more = (
        f"; also missing for {', '.join(f'process[{m.index}].{m.name}' for m in missing[1:])}"
        if len(missing) > 1
        else ""
    )
    raise RecipeError(
        recipe.source_file,
        f"process[{o.index}].{o.name}.num_gpus",
        f"partition.gpu_preflight_enabled is false, so nothing measures CUDA op {o.name}: "
        f"give it explicit resources (num_gpus, and memory / batch_size as needed){more}"
        ", or set partition.gpu_preflight_enabled: true",
    )
