"""The benchmarks of airflow-provider-dj, one package behind one entry point.

Run a section from the repository root with the project's virtualenv::

    .venv/bin/python -m bench --help          # the sections, one line each
    .venv/bin/python -m bench SECTION [ARGS]  # e.g. ``-m bench e2e --quick --skip-dj``

``SECTIONS`` is the registry ``python -m bench`` dispatches on: section name ->
(module, one-line summary).  Each section module has ``main(argv) -> int``.
A new benchmark is added here, or ``tests/unit/test_bench_package.py`` fails.
Every figure a section writes to a file (JSON, text and Markdown tables, SVG
charts) goes through ``bench.report``, and every chart through
``bench.report.svg.chart``.

This module imports nothing heavy: ``--help`` must not pay for Airflow or Ray.
"""

from __future__ import annotations

#: section name -> (module, one-line summary); ``python -m bench --help`` prints them in this order.
SECTIONS: dict[str, tuple[str, str]] = {
    "startup": ("bench.startup_bench", "fixed start-up: an empty-input dj-airflow run against `import airflow`"),
    "e2e": ("bench.run_bench", "dj-airflow run against Data-Juicer's default executor, end to end, same corpus"),
    "all": ("bench.run_all", "checkpoint, resume, scale and per-op sections in one run; Markdown + SVG report"),
    "ops": ("bench.ops.run_ops_bench", "per-op throughput against Data-Juicer's ops of the same name"),
    "resume": ("bench.resume_bench", "strict resume validation, and resuming a completed job against a full run"),
    "nightly": ("bench.nightly_bench", "nightly reuse: night 2 against a from-scratch run and Data-Juicer"),
    "executor-choice": (
        "bench.executor_choice_bench",
        "dj-airflow run's Ray-only-where-it-pays (auto) against --executor ray: nights, one row, empty",
    ),
    "nightly-scheduler": (
        "bench.nightly_scheduler_bench",
        "nightly reuse under the scheduler: night 2 against a from-scratch DAG run on airflow standalone",
    ),
    "parts-export": (
        "bench.partition_parts_export_bench",
        "partition_shards export from parallel parts: each part hard-linked as its shard, against copied",
    ),
    "lineage": ("bench.lineage_bench", "per-row lineage's cost: the same in-process job with lineage off and on"),
    "tracer": ("bench.tracer_bench", "tracer overhead: the same in-process job with open_tracer off and on"),
    "history-index": (
        "bench.history_index_bench",
        "history-index lookups within a memory budget, against a set and numpy",
    ),
    "expensive-ops": ("bench.expensive_ops_bench", "embedding throughput on the CPU, and what committed batches cost"),
    "gpu-planning": ("bench.gpu_planning_bench", "GPU preflight probe and planner decisions on the CPU path"),
    "job-view": ("bench.job_view_bench", "the Airflow UI job view's page time on a 1,000-partition job"),
    "big-partition": (
        "bench.big_partition_bench",
        "one partition past Arrow's 2 GiB string limit through dj-airflow run: exact export, memory, time",
    ),
    "scale": ("bench.scale_bench", "the spine recipe at 1M, 3M and 10M rows, auto and 4 partitions: memory and time"),
    "at-scale": (
        "bench.at_scale_bench",
        "10M, 100M and 1B rows planned by the real planner and DAG: counts, memory, limits",
    ),
    "global-shards": ("bench.global_shards", "a global op's step in one process against shards: time, RSS, same masks"),
    "minhash-vs-dj": (
        "bench.minhash_vs_dj",
        "MinHash near-dedup through dj-airflow run against Data-Juicer's MinHash and Ray BTS ops, same input",
    ),
    "minhash-kernel": (
        "bench.minhash_kernel",
        "MinHash op's CPU seconds per row against its previous kernel, A/B interleaved, same output",
    ),
    "memory-at-scale": (
        "bench.memory_at_scale",
        "every process's peak RSS of an exact-dedup dj-airflow run at 10M and 30M rows, global step's defaults",
    ),
    "memory-ray-jobs": (
        "bench.memory_ray_jobs",
        "every process's peak RSS of a DAG run in Ray Jobs mode under airflow standalone, by kind of process",
    ),
    "masks-scaling": (
        "bench.shard_masks_scaling",
        "the sharded global step's partner look-up and masks against the partition count, A/B with a checkout",
    ),
    "planning": (
        "bench.planning_bench",
        "planning (index + partition hashes) by 1 task at a time against threads and Ray tasks: time vs cores",
    ),
    "ray-jobs": (
        "bench.ray_jobs_bench",
        "Ray Jobs mode against the in-worker driver on one cluster: overhead per group, worker-slot-seconds",
    ),
    "plot": ("bench.report.published", "redraw docs/img/benchmarks.svg from the published end-to-end table"),
}

#: Modules that are started as child processes by a section, never from the command line.
CHILD_ENTRY_POINTS: dict[str, str] = {
    "bench._parsebench": "DAG parse time in a fresh interpreter, for the e2e section",
    "bench._hashbench": "partition-hash kernels in a fresh interpreter that imports the measured code",
    "bench.ops.dj_ops_worker": "Data-Juicer's side of the ops section, run by Data-Juicer's own interpreter",
}
