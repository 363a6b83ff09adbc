"""Fixtures for integration tests: a migrated Airflow metadata DB and a local Ray."""

from __future__ import annotations

import json
import os
import textwrap

import pytest


@pytest.fixture(scope="session")
def airflow_home():
    from airflow_provider_dj.cli.airflow_env import configure_airflow_env, ensure_db

    home = configure_airflow_env()
    ensure_db(home)
    # The in-process dag.test() runs of this worker get the app `dj-airflow run` uses: one API
    # version, built once (airflow_provider_dj/cli/in_process_api.py), 4.5 s less per worker.
    from airflow_provider_dj.cli.in_process_api import build_for_own_client_only

    build_for_own_client_only()
    return home


@pytest.fixture(scope="session")
def ray_cluster():
    import ray

    ray.init(address="local", num_cpus=2, include_dashboard=False, configure_logging=False, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def corpus(session_dir) -> str:
    from airflow_provider_dj.testing.sample_corpus import write_corpus

    return write_corpus(os.path.join(session_dir, "data", "corpus.jsonl"), 400, seed=11)


RECIPE = """\
project_name: {name}
dataset_path: {data}
export_path: {export}
work_dir: {work}
text_keys: text
partition:
  mode: manual
  num_of_partitions: {parts}
checkpoint:
  enabled: true
  strategy: {strategy}
process:
  - clean_email_mapper:
  - whitespace_normalization_mapper:
  - words_num_filter:
      min_num: 5
      max_num: 2000
  - text_length_filter:
      min_len: 20
  - document_deduplicator:
      lowercase: true
"""


@pytest.fixture
def make_recipe(tmp_path, corpus):
    def make(name: str, parts: int = 4, strategy: str = "every_op", extra: str = "", data: str | None = None) -> str:
        path = tmp_path / f"{name}.yaml"
        path.write_text(
            RECIPE.format(
                name=name,
                data=data or corpus,
                export=tmp_path / f"{name}_out.jsonl",
                work=tmp_path / "work",
                parts=parts,
                strategy=strategy,
            )
            + textwrap.dedent(extra)
        )
        return str(path)

    return make


@pytest.fixture
def run_dag(airflow_home, ray_cluster):
    """Run a recipe's DAG with dag.test(); returns the DagRun."""
    from airflow_provider_dj.cli.airflow_env import write_cli_dag_stub
    from airflow_provider_dj.dag_builder.factory import build_dag
    from airflow_provider_dj.engine.config.recipe import load_recipe, sanitize_dag_id

    def run(recipe_path: str, conf: dict | None = None, retries: int | None = None):
        dag_id = sanitize_dag_id(load_recipe(recipe_path).project_name)
        write_cli_dag_stub(airflow_home, recipe_path, dag_id)
        dag = build_dag(recipe_path, dag_id=dag_id, retries=retries)
        return dag.test(run_conf=conf or {})

    return run


def read_jsonl(path) -> list[dict]:
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]
