"""GPU preflight: measuring each CUDA op on a small sample before the job plans its actors.

``contracts`` (field contracts -> probe units), ``sampling`` (the probe sample), ``memory``
(device memory of one probe call), ``probe`` (one op on the sample, through the op runner),
``executors`` (Ray / subprocess / inline), ``worker`` (the one-off probe process), ``preflight``
(orchestration; it writes the report ``engine/gpu/report.py`` defines) and ``check`` (the
``scripts/gpu_check.sh`` entry point).  It runs ops, so it sits above ``execution``; what planning
reads of its results is in ``engine/gpu/``.  Nothing here imports Airflow, and Ray only on the Ray
path.
"""
