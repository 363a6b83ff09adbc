"""The five-op pipeline through our generated DAG gives exactly Data-Juicer 1.6.1's own export.

The expected output was produced once by Data-Juicer's default executor
(tests/conformance/regenerate.sh) and committed; Data-Juicer is not imported here.
"""

from __future__ import annotations

import os

import pytest

from tests.integration.conftest import read_jsonl

pytestmark = pytest.mark.integration

FIX = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "conformance", "fixtures", "pipeline")


@pytest.mark.parametrize("parts", [1, 3, 8])
def test_pipeline_matches_data_juicer_for_any_partition_count(tmp_path, run_dag, parts):
    recipe = tmp_path / "pipe.yaml"
    text = open(os.path.join(FIX, "recipe.yaml")).read()
    text = text.replace("project_name: conformance-pipeline", f"project_name: conf_pipe_{parts}")
    text = text.replace(
        "dataset_path: tests/conformance/fixtures/pipeline/input.jsonl",
        f"dataset_path: {os.path.join(FIX, 'input.jsonl')}",
    )
    text = text.replace(
        "export_path: /tmp/dj-conformance-pipeline/result.jsonl", f"export_path: {tmp_path / 'out.jsonl'}"
    )
    text += f"partition:\n  mode: manual\n  num_of_partitions: {parts}\nkeep_stats_in_res_ds: true\n"
    recipe.write_text(text)
    dr = run_dag(str(recipe), {"job_id": f"conf{parts}"})
    assert str(dr.state).endswith("success")
    ours = read_jsonl(tmp_path / "out.jsonl")
    expected = read_jsonl(os.path.join(FIX, "expected.jsonl"))
    stats = read_jsonl(os.path.join(FIX, "expected_stats.jsonl"))
    assert len(ours) == len(expected) == 192
    for got, want, st in zip(ours, expected, stats):
        assert {k: v for k, v in got.items() if k != "__dj__stats__"} == want
        assert got["__dj__stats__"] == st["__dj__stats__"]
