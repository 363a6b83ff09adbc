"""DAG parse time of N recipes, in a fresh interpreter (run by run_bench.py).

Usage: python -m bench._parsebench OUT_JSON DATASET_PATH [N]

Prints nothing useful; writes a JSON object to OUT_JSON.  Set AIRFLOW_HOME
(or DJ_AIRFLOW_HOME) before running so Airflow's import finds a config.

Timed separately:
* ``import_provider_s``: ``import airflow_provider_dj.dag_builder.factory``.
* ``import_airflow_s``: ``airflow.sdk`` and the provider's operator modules
  (what the first ``build_dag`` would otherwise pay for).
* ``first_call_s``: the first ``register_recipe_dags`` over N recipe files.
* ``warm_calls_s``: further calls on the same files (a DAG processor re-parse).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    out_json, dataset_path = args[0], args[1]
    n = int(args[2]) if len(args) > 2 else 50
    from bench._recipes import ours_recipe, write_yaml

    home = os.environ.get("AIRFLOW_HOME") or os.environ.get("DJ_AIRFLOW_HOME")
    if home:
        os.environ["AIRFLOW_HOME"] = home
    os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
    os.environ.setdefault("AIRFLOW__CORE__UNIT_TEST_MODE", "False")

    res: dict = {"n_recipes": n}
    with tempfile.TemporaryDirectory(prefix="dj_parse_bench_") as tmp:
        rdir = os.path.join(tmp, "recipes")
        for i in range(n):
            r = ours_recipe(
                name=f"bench_parse_{i:03d}",
                dataset_path=dataset_path,
                export_path=os.path.join(tmp, "out", f"r{i}.jsonl"),
                work_dir=os.path.join(tmp, "work"),
                partitions=str(1 + i % 8),
            )
            # Some variety in the op arguments.
            r["process"] = [dict(op) for op in r["process"]]
            r["process"][2] = {"words_num_filter": {"min_num": 3 + i % 5, "max_num": 2000}}
            write_yaml(os.path.join(rdir, f"recipe_{i:03d}.yaml"), r)

        t0 = time.perf_counter()
        import airflow_provider_dj.dag_builder.factory as dag_factory

        res["import_provider_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        import airflow.sdk  # noqa: F401

        import airflow_provider_dj.operators.export
        import airflow_provider_dj.operators.global_op
        import airflow_provider_dj.operators.gpu_preflight
        import airflow_provider_dj.operators.partition_group
        import airflow_provider_dj.operators.resume_validator
        import airflow_provider_dj.sensors.checkpoint  # noqa: F401

        res["import_airflow_s"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        built = dag_factory.register_recipe_dags({}, directory=rdir)
        res["first_call_s"] = time.perf_counter() - t0
        broken = sorted(k for k in built if k.startswith("dj_broken__"))
        res["dags_built"] = len(built) - len(broken)
        res["broken"] = broken
        warm = []
        for _ in range(3):
            t0 = time.perf_counter()
            dag_factory.register_recipe_dags({}, directory=rdir)
            warm.append(time.perf_counter() - t0)
        res["warm_calls_s"] = warm
        res["first_ms_per_recipe"] = res["first_call_s"] * 1000 / n
        res["warm_ms_per_recipe"] = statistics.median(warm) * 1000 / n
        sample = next((v for k, v in built.items() if not k.startswith("dj_broken__")), None)
        res["tasks_per_dag"] = len(sample.tasks) if sample is not None else None
    with open(out_json, "w") as fh:
        json.dump(res, fh, indent=2)
    return 0 if not res["broken"] else 3


if __name__ == "__main__":
    sys.exit(main())
