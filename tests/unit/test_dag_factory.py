"""The generated DAG's shape, and isolation of broken recipes, through Airflow's own DagBag."""

from __future__ import annotations

import os
import shutil

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DAG_FILE = os.path.join(REPO, "dags", "dj_recipes.py")
DEMO = os.path.join(REPO, "dags", "recipes", "demo.yaml")


def _bag(monkeypatch, recipes_dir):
    from airflow.dag_processing.dagbag import DagBag

    monkeypatch.setenv("DJ_RECIPES_DIR", str(recipes_dir))
    return DagBag(dag_folder=DAG_FILE)


def test_demo_dag_has_expected_tasks_and_wiring():
    from airflow_provider_dj.dag_builder.factory import build_dag

    dag = build_dag(DEMO)
    assert dag.dag_id == "dj_demo"
    assert set(dag.task_ids) == {
        "gpu_preflight",
        "validate",
        "partitions_seg0",
        "barrier_seg0",
        "global_op4_document_deduplicator",
        "partitions_seg1",
        "export",
    }
    t = dag.task_dict
    assert t["gpu_preflight"].downstream_task_ids == {"validate"}
    assert t["validate"].downstream_task_ids == {"partitions_seg0", "partitions_seg1"}  # both mapped over its output
    assert t["partitions_seg0"].downstream_task_ids == {"barrier_seg0"}
    assert t["barrier_seg0"].downstream_task_ids == {"global_op4_document_deduplicator"}
    assert t["global_op4_document_deduplicator"].downstream_task_ids == {"partitions_seg1"}
    assert t["partitions_seg1"].downstream_task_ids == {"export"}
    assert t["partitions_seg0"].map_index_template == "{{ task.execution_group['label'] }}"
    assert dag.schedule is None
    assert {"partition.num_of_partitions", "partition", "job_id", "resume", "dataset_path"} <= set(dag.params.keys())


def test_mapped_partition_tasks_carry_airflow_operator_defaults_not_none():
    """Airflow 3.3.2's ``.partial()`` takes defaults from the operator class's ``__init__`` signature.  Our
    mapped tasks must get Airflow's defaults (lists), not ``None``: a ``None`` inlets made every mapped task
    fail at start-up, in the task runner's template context ("'NoneType' object is not iterable")."""
    from airflow_provider_dj.dag_builder.factory import build_dag

    dag = build_dag(DEMO)
    for task_id in ("partitions_seg0", "partitions_seg1"):
        mapped = dag.task_dict[task_id]
        assert mapped.inlets == [] and mapped.outlets == [], task_id
        assert mapped.on_failure_callback is not None, task_id  # ours: it records the failure in the job dir
        assert mapped.executor_config == {}, task_id


def test_recipe_without_global_ops_has_one_segment_and_no_barrier(tmp_path):
    from airflow_provider_dj.dag_builder.factory import build_dag

    p = tmp_path / "r.yaml"
    p.write_text(
        "project_name: 'my recipe/v2'\ndataset_path: in.jsonl\nexport_path: out.jsonl\nschedule: '0 3 * * *'\n"
        "partition: {max_concurrent_partitions: 3}\nprocess:\n  - text_length_filter:\n"
    )
    dag = build_dag(str(p))
    assert dag.dag_id == "my_recipe_v2"
    assert set(dag.task_ids) == {"gpu_preflight", "validate", "partitions_seg0", "export"}
    assert dag.schedule == "0 3 * * *"
    assert dag.task_dict["partitions_seg0"].partial_kwargs["max_active_tis_per_dagrun"] == 3


def test_broken_recipe_beside_good_ones_leaves_them_loadable(tmp_path, monkeypatch):
    shutil.copy(DEMO, tmp_path / "demo.yaml")
    (tmp_path / "data").symlink_to(os.path.join(REPO, "dags", "recipes", "data"))
    (tmp_path / "typo.yaml").write_text(
        "project_name: typo\ndataset_path: x.jsonl\nexport_path: y.jsonl\nprocess:\n  - clean_emial_mapper:\n"
    )
    (tmp_path / "notyaml.yml").write_text("process: [unclosed\n")
    bag = _bag(monkeypatch, tmp_path)
    assert not bag.import_errors
    assert "dj_demo" in bag.dags
    assert len(bag.dags["dj_demo"].task_ids) == 7
    broken = bag.dags["dj_broken__typo"]
    assert "clean_emial_mapper" in broken.doc_md and "clean_email_mapper" in broken.doc_md  # did-you-mean shown
    assert "dj_broken__notyaml" in bag.dags


def test_duplicate_dag_ids_name_both_files(tmp_path, monkeypatch):
    for name in ("a", "b"):
        (tmp_path / f"{name}.yaml").write_text(
            "project_name: same\ndataset_path: x.jsonl\nexport_path: y.jsonl\nprocess:\n  - text_length_filter:\n"
        )
    bag = _bag(monkeypatch, tmp_path)
    assert "same" not in bag.dags
    doc = bag.dags["dj_broken__a"].doc_md
    assert "a.yaml" in doc and "b.yaml" in doc


def test_parsing_reads_no_data(tmp_path, monkeypatch):
    """The recipe's dataset does not even exist: parsing must still succeed (no data work at parse time)."""
    (tmp_path / "r.yaml").write_text(
        "project_name: nodata\ndataset_path: /nonexistent/in.jsonl\n"
        "export_path: /nonexistent/out.jsonl\nprocess:\n  - document_deduplicator:\n"
    )
    bag = _bag(monkeypatch, tmp_path)
    assert "nodata" in bag.dags


def test_partition_tasks_defer_in_ray_jobs_mode_unless_the_setting_says_wait_in_the_worker(monkeypatch):
    """``[dj] ray_jobs_deferrable``: on by default; off (a deployment without a triggerer) the
    partition tasks wait for their Ray job in the worker."""
    from airflow_provider_dj import settings
    from airflow_provider_dj.dag_builder.factory import build_dag

    monkeypatch.delenv("AIRFLOW__DJ__RAY_JOBS_DEFERRABLE", raising=False)
    settings.reset()
    dag = build_dag(DEMO)
    assert {dag.task_dict[t].partial_kwargs["deferrable"] for t in ("partitions_seg0", "partitions_seg1")} == {True}
    monkeypatch.setenv("AIRFLOW__DJ__RAY_JOBS_DEFERRABLE", "0")
    settings.reset()
    try:
        dag = build_dag(DEMO)
    finally:
        monkeypatch.delenv("AIRFLOW__DJ__RAY_JOBS_DEFERRABLE")
        settings.reset()
    assert {dag.task_dict[t].partial_kwargs["deferrable"] for t in ("partitions_seg0", "partitions_seg1")} == {False}


def test_without_recipes_dir_the_recipes_folder_beside_the_dag_file_is_read(monkeypatch, tmp_path):
    """A deployment copies dags/dj_recipes.py and a recipes/ folder into its DAGs folder and sets nothing."""
    from airflow.dag_processing.dagbag import DagBag

    for name in ("DJ_RECIPES_DIR", "AIRFLOW__DJ__RECIPES_DIR"):
        monkeypatch.delenv(name, raising=False)
    dags = tmp_path / "deployed_dags"
    (dags / "recipes").mkdir(parents=True)
    shutil.copy(DAG_FILE, dags / "dj_recipes.py")
    shutil.copy(DEMO, dags / "recipes" / "demo.yaml")
    bag = DagBag(dag_folder=str(dags / "dj_recipes.py"))
    assert bag.import_errors == {}
    assert list(bag.dag_ids) == ["dj_demo"]


def test_a_recipe_chooses_deferral_for_its_own_dag_and_a_trigger_cannot_change_it(monkeypatch, tmp_path):
    """``partition.ray_jobs_deferrable`` in the recipe beats ``[dj] ray_jobs_deferrable`` for every task
    that may wait on a Ray Job (validate, the groups, the global step, the export); null keeps the
    setting.  It shapes the parsed DAG, so a trigger's conf naming it is refused, not dropped."""
    import pytest

    from airflow_provider_dj import settings
    from airflow_provider_dj.dag_builder.factory import build_dag
    from airflow_provider_dj.engine.config.overrides import normalize_overrides
    from airflow_provider_dj.engine.config.schema import RecipeError

    waiting = ("validate", "partitions_seg0", "partitions_seg1", "global_op4_document_deduplicator", "export")
    base = open(DEMO).read()

    def deferral(value: str | None) -> dict[str, bool]:
        text = base if value is None else base.replace("partition:\n", f"partition:\n  ray_jobs_deferrable: {value}\n")
        path = tmp_path / f"r_{value}.yaml"
        path.write_text(text)
        dag = build_dag(str(path))
        return {
            t: getattr(dag.task_dict[t], "partial_kwargs", {}).get(
                "deferrable", getattr(dag.task_dict[t], "deferrable", None)
            )
            for t in waiting
        }

    monkeypatch.delenv("AIRFLOW__DJ__RAY_JOBS_DEFERRABLE", raising=False)
    settings.reset()
    assert deferral(None) == dict.fromkeys(waiting, True)
    assert deferral("false") == dict.fromkeys(waiting, False)
    monkeypatch.setenv("AIRFLOW__DJ__RAY_JOBS_DEFERRABLE", "0")
    settings.reset()
    try:
        assert deferral(None) == dict.fromkeys(waiting, False)
        assert deferral("true") == dict.fromkeys(waiting, True)
    finally:
        monkeypatch.delenv("AIRFLOW__DJ__RAY_JOBS_DEFERRABLE")
        settings.reset()
    with pytest.raises(RecipeError, match="cannot be overridden from dag_run.conf"):
        normalize_overrides({"partition": {"ray_jobs_deferrable": False}})
    bad = tmp_path / "bad.yaml"
    bad.write_text(base.replace("partition:\n", "partition:\n  ray_jobs_deferrable: 'no'\n"))
    with pytest.raises(RecipeError, match=r"partition.ray_jobs_deferrable.*must be true or false"):
        build_dag(str(bad))
