"""GPU preflight (measurement) and planning.

Measurement: ``memory`` (device memory probes), ``sampling`` (the probe
sample), ``contracts`` (field contracts -> probe units), ``probe`` (the
worker), ``executors`` (Ray / subprocess / inline), ``report`` (report,
cache, num_gpus rule), ``preflight`` (orchestration), ``check`` (the
``scripts/gpu_check.sh`` entry point).  Nothing here imports Airflow, and
Ray only on the Ray path.
"""
