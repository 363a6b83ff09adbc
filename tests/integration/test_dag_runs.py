"""End-to-end runs of generated DAGs with a real Airflow (dag.test) and a real local Ray."""

from __future__ import annotations

import json
import os
import re

import pytest

from airflow_provider_dj.engine.jobdir.events import read_events
from tests.helpers_compare import assert_same_bytes
from tests.integration.conftest import read_jsonl

pytestmark = pytest.mark.integration


def _state(dr) -> str:
    return str(dr.state).split(".")[-1].lower()


def _job_dir(recipe_path: str, job_id: str) -> str:
    return os.path.join(os.path.dirname(recipe_path), "work", job_id)


def test_demo_shaped_run_exports_expected_rows_and_files(make_recipe, run_dag):
    recipe = make_recipe("it_basic", parts=4)
    dr = run_dag(recipe, {"job_id": "basic"})
    assert _state(dr) == "success"
    job_dir = _job_dir(recipe, "basic")
    summary = json.load(open(os.path.join(job_dir, "job_summary.json")))
    rows = read_jsonl(recipe.replace(".yaml", "_out.jsonl"))
    assert summary["export"]["rows"] == len(rows) > 0
    # accounting closes for every op and chains op to op
    prev_out = 400
    for op in summary["ops"]:
        assert op["rows_in"] == prev_out
        assert op["rows_in"] == op["rows_out"] + op["filtered"] + op["duplicates"] + op["failed"]
        prev_out = op["rows_out"]
    assert summary["ops"][-1]["duplicates"] > 0  # the corpus has duplicates and the dedup saw all partitions
    texts = [r["text"] for r in rows]
    assert len({t.lower() for t in texts}) == len(texts)
    email = re.compile(r"[A-Za-z0-9.\-+_]+@[a-z0-9.\-+_]+\.[a-z]+")
    assert not any(email.search(t) for t in texts)  # Data-Juicer's default e-mail pattern finds nothing left
    assert all("__dj__stats__" not in r for r in rows)  # keep_stats_in_res_ds defaults to false
    # ids stay in input order
    ids = [r["id"] for r in rows]
    assert ids == sorted(ids)
    cps = os.listdir(os.path.join(job_dir, "checkpoints"))
    assert "partitioning_info.json" in cps
    for i, name in enumerate(
        [
            "clean_email_mapper",
            "whitespace_normalization_mapper",
            "words_num_filter",
            "text_length_filter",
            "document_deduplicator",
        ]
    ):
        d = os.path.join(job_dir, "checkpoints", f"checkpoint_op_{i:03d}_{name}")
        assert sorted(f for f in os.listdir(d) if f.endswith(".parquet")) == [
            f"partition_{p:05d}.parquet" for p in range(4)
        ]
    types = {e["event_type"] for e in read_events(job_dir)}
    assert {
        "job_start",
        "plan_created",
        "partition_start",
        "op_start",
        "op_complete",
        "checkpoint_save",
        "global_op_complete",
        "export_complete",
        "job_complete",
    } <= types
    plan = json.load(open(os.path.join(job_dir, "dag_execution_plan.json")))
    assert [s["airflow_task_id"] for s in plan["segments"]] == ["partitions_seg0", "partitions_seg1"]
    assert len(plan["execution_groups"]) == 4


@pytest.fixture(scope="module")
def reference_export(tmp_path_factory, corpus, airflow_home, ray_cluster):
    """A clean 1-partition run's export, produced once for the comparisons below."""
    from airflow_provider_dj.cli.airflow_env import write_cli_dag_stub
    from airflow_provider_dj.dag_builder.factory import build_dag
    from tests.integration.conftest import RECIPE

    d = tmp_path_factory.mktemp("ref")
    path = d / "it_ref.yaml"
    path.write_text(
        RECIPE.format(
            name="it_ref", data=corpus, export=d / "ref_out.jsonl", work=d / "work", parts=1, strategy="every_op"
        )
    )
    write_cli_dag_stub(airflow_home, str(path), "it_ref")
    dr = build_dag(str(path), dag_id="it_ref").test(run_conf={"job_id": "ref"})
    assert _state(dr) == "success"
    with open(d / "ref_out.jsonl", "rb") as fh:
        return fh.read()


@pytest.mark.parametrize(
    "parts,strategy,extra",
    [
        (4, "every_op", ""),
        (7, "every_n_ops", "  n_ops: 2\n"),
        (3, "manual", "  op_names: [whitespace_normalization_mapper]\n"),
        (5, "disabled", ""),
    ],
)
def test_export_is_identical_for_any_partition_count_and_checkpoint_strategy(
    make_recipe, run_dag, reference_export, parts, strategy, extra
):
    recipe = make_recipe(f"it_inv_{parts}_{strategy}", parts=parts, strategy=strategy)
    if extra:
        text = open(recipe).read().replace(f"  strategy: {strategy}\n", f"  strategy: {strategy}\n{extra}")
        open(recipe, "w").write(text)
    dr = run_dag(recipe, {"job_id": "inv"})
    assert _state(dr) == "success"
    with open(recipe.replace(".yaml", "_out.jsonl"), "rb") as fh:
        assert_same_bytes(fh.read(), reference_export)


def test_parallel_jsonl_export_writes_the_same_bytes(make_recipe, run_dag, reference_export, monkeypatch):
    """Partitions serialized to part files by Ray workers, copied in order: byte for byte the sequential export."""
    monkeypatch.setenv("DJ_PARALLEL_EXPORT_MIN_ROWS", "0")  # 400 rows: below the default threshold
    recipe = make_recipe("it_par_export", parts=4)
    assert _state(run_dag(recipe, {"job_id": "par"})) == "success"
    with open(recipe.replace(".yaml", "_out.jsonl"), "rb") as fh:
        assert_same_bytes(fh.read(), reference_export)
    job_dir = _job_dir(recipe, "par")
    assert not os.path.exists(os.path.join(job_dir, "export_parts"))  # parts removed once the export committed
    summary = json.load(open(os.path.join(job_dir, "job_summary.json")))
    assert summary["export"]["bytes"] == len(reference_export)
    (done,) = read_events(job_dir, "export_complete")
    assert done["serialized_in_parallel"] is True


def test_conf_overrides_nested_and_dotted_are_equivalent(make_recipe, run_dag, reference_export, tmp_path):
    recipe = make_recipe("it_conf", parts=1)
    dr = run_dag(recipe, {"job_id": "nested", "partition": {"num_of_partitions": 6}})
    assert _state(dr) == "success"
    info = json.load(open(os.path.join(_job_dir(recipe, "nested"), "checkpoints", "partitioning_info.json")))
    assert info["num_partitions"] == 6
    out2 = tmp_path / "dotted_out.jsonl"
    dr = run_dag(recipe, {"job_id": "dotted", "partition.num_of_partitions": 3, "export_path": str(out2)})
    assert _state(dr) == "success"
    info = json.load(open(os.path.join(_job_dir(recipe, "dotted"), "checkpoints", "partitioning_info.json")))
    assert info["num_partitions"] == 3
    assert_same_bytes(out2.read_bytes(), reference_export)


def test_bad_conf_fails_validate_before_any_work(make_recipe, run_dag):
    recipe = make_recipe("it_badconf", parts=2)
    dr = run_dag(recipe, {"job_id": "bad", "partition": {"num_of_partitionz": 3}})
    assert _state(dr) == "failed"
    assert not os.path.exists(_job_dir(recipe, "bad"))  # nothing planned, nothing written


def test_more_partitions_than_rows_fails_before_partition_tasks(make_recipe, run_dag):
    recipe = make_recipe("it_toomany", parts=401)
    dr = run_dag(recipe, {"job_id": "toomany"})
    assert _state(dr) == "failed"
    assert not os.path.exists(os.path.join(_job_dir(recipe, "toomany"), "checkpoints"))


def test_empty_input_exports_an_empty_file(make_recipe, run_dag, tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    recipe = make_recipe("it_empty", parts=4, data=str(empty))
    dr = run_dag(recipe, {"job_id": "empty"})
    assert _state(dr) == "success"
    assert open(recipe.replace(".yaml", "_out.jsonl")).read() == ""
    summary = json.load(open(os.path.join(_job_dir(recipe, "empty"), "job_summary.json")))
    assert summary["export"]["rows"] == 0 and summary["input"]["partitions"] == 0
