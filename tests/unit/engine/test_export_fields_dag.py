"""The export-field rule through a real DAG: Airflow's dag.test(), a real local Ray,
real files.  The input carries Data-Juicer-internal fields; the exports (one
serialized by the export task, one serialized on Ray workers) must be Data-Juicer's
own export of the same recipe (tests/conformance/export_fields/expected), byte for
byte the same as each other, with no engine column in them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

FIX = Path(__file__).parents[2] / "conformance" / "export_fields"
SPEC = json.loads((FIX / "variants.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def run_dag():
    import ray

    from airflow_provider_dj.cli.airflow_env import configure_airflow_env, ensure_db, write_cli_dag_stub
    from airflow_provider_dj.dag_builder.factory import build_dag
    from airflow_provider_dj.engine.config.recipe import load_recipe, sanitize_dag_id

    home = configure_airflow_env()
    ensure_db(home)
    started = not ray.is_initialized()
    if started:
        ray.init(address="local", num_cpus=2, include_dashboard=False, configure_logging=False, log_to_driver=False)

    def run(recipe_path: str, conf: dict):
        dag_id = sanitize_dag_id(load_recipe(recipe_path).project_name)
        write_cli_dag_stub(home, recipe_path, dag_id)
        return build_dag(recipe_path, dag_id=dag_id).test(run_conf=conf)

    yield run
    if started:
        ray.shutdown()


def test_dag_exports_keep_data_juicer_fields(tmp_path: Path, run_dag, monkeypatch) -> None:
    monkeypatch.setenv("DJ_PARALLEL_EXPORT_MIN_ROWS", "0")  # 5 rows: force the Ray part files
    expected = [json.loads(line) for line in (FIX / "expected" / "keep_stats.jsonl").read_text().splitlines()]
    outputs = {}
    for parallel in (True, False):
        out = tmp_path / f"out_{parallel}.jsonl"
        recipe = {
            "project_name": f"export_fields_dag_{parallel}",
            "dataset_path": str(FIX / "input.jsonl"),
            "export_path": str(out),
            "work_dir": str(tmp_path / "work"),
            "partition": {"mode": "manual", "num_of_partitions": 2},
            "process": SPEC["process"],
            "keep_stats_in_res_ds": True,
            "export_in_parallel": parallel,
        }
        path = tmp_path / f"r_{parallel}.yaml"
        path.write_text(yaml.safe_dump(recipe), encoding="utf-8")
        dr = run_dag(str(path), {"job_id": f"ef{parallel}"})
        assert str(getattr(dr.state, "value", dr.state)) == "success"
        rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
        assert rows == expected
        assert all(r["__dj__suffix__"] == ".txt" and "__dj__input_row__" not in r for r in rows)
        events = [
            json.loads(line)
            for f in (tmp_path / "work" / f"ef{parallel}").glob("events_*.jsonl")
            for line in f.read_text().splitlines()
        ]
        (done,) = [e for e in events if e.get("event") == "export_complete" or e.get("event_type") == "export_complete"]
        assert bool(done.get("serialized_in_parallel")) is parallel
        outputs[parallel] = out.read_bytes()
    assert outputs[True] == outputs[False]
