"""The engine: recipes in, partitioned, checkpointed, exported jobs out; no Airflow.

The Python API is :func:`run_job` (docs/python_api.md)::

    from airflow_provider_dj.engine import run_job

    result = run_job("recipe.yaml", work_dir="/tmp/jobs", workers=2)
    print(result.rows, result.export_path, result.job_id)

Names are resolved on first use, so importing one engine module does not
import the whole engine.
"""

from __future__ import annotations

from airflow_provider_dj.core.lazy import lazy_exports

__all__ = ["JobResult", "JobStopped", "run_job", "run_prepared_job"]

_EXPORTS = {
    "run_job": "airflow_provider_dj.engine.runner.local",
    "run_prepared_job": "airflow_provider_dj.engine.runner.local",
    "JobResult": "airflow_provider_dj.engine.runner.local",
    "JobStopped": "airflow_provider_dj.engine.runner.stop",
}


__getattr__ = lazy_exports(__name__, _EXPORTS)
