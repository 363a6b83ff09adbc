"""The engine: recipes in, partitioned, checkpointed, exported jobs out; no Airflow.

The Python API (docs/python_api.md) is what ``__all__`` names; everything else under ``engine`` is
the engine's own and may change::

    from airflow_provider_dj.engine import run_job

    result = run_job("recipe.yaml", work_dir="/tmp/jobs", workers=2)
    print(result.rows, result.export_path, result.job_id)

``run_job`` runs a whole recipe; ``load_recipe`` + ``prepare_job`` + ``run_prepared_job`` are its two
halves for a caller that looks at the plan first.  Errors: ``airflow_provider_dj.exceptions``.

Names are resolved on first use, so importing one engine module does not import the whole engine,
and the table below adds no import edge between the engine's sub-packages.
"""

from __future__ import annotations

from airflow_provider_dj.core.lazy import lazy_exports

__all__ = [
    "JobResult",
    "JobStopped",
    "PreparedJob",
    "Recipe",
    "load_recipe",
    "prepare_job",
    "run_job",
    "run_prepared_job",
]

_EXPORTS = {
    "run_job": "airflow_provider_dj.engine.runner.local",
    "run_prepared_job": "airflow_provider_dj.engine.runner.local",
    "JobResult": "airflow_provider_dj.engine.runner.local",
    "JobStopped": "airflow_provider_dj.engine.runner.stop",
    "load_recipe": "airflow_provider_dj.engine.config.recipe",
    "Recipe": "airflow_provider_dj.engine.config.schema",
    "prepare_job": "airflow_provider_dj.engine.job.setup",
    "PreparedJob": "airflow_provider_dj.engine.job.setup",
}


__getattr__ = lazy_exports(__name__, _EXPORTS)


def __dir__() -> list[str]:
    return list(__all__)
