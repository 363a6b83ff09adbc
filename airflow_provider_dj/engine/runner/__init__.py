"""The job's steps and the local executor: the top layer of the engine.

``start.py`` (the first step), ``steps.py`` (a segment for a group, a global
step, the export), ``preflight.py`` (the GPU probe before them), ``stop.py``
(the stop protocol around each step), ``dispatch.py`` (where a group's
partitions run) and ``local.py`` (``run_job``: every step in order, in one
process).  The Airflow operators, the CLI, the benchmarks and the tests call
these same functions.
"""
