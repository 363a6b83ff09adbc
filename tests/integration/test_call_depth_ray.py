"""A short path in a Ray task too: at most ``MAX_FRAMES`` frames from the remote ``segment_task``
(engine/execution/ray_dispatch.py) to an op's ``process_table``, measured in a real Ray worker of the
session's local Ray.  The in-process path from ``run_job`` (10 frames, four of them above ``segment_task``)
is measured in tests/unit/engine/test_call_depth.py; docs/architecture.md draws both."""

from __future__ import annotations

import pytest

from airflow_provider_dj.engine.config.recipe import load_recipe
from airflow_provider_dj.engine.execution.ray_dispatch import run_partitions
from airflow_provider_dj.engine.job.setup import prepare_job
from tests.integration.call_depth_helpers import read_depths

pytestmark = pytest.mark.integration

MAX_FRAMES = 6  # segment_task, run_segment, run_ops, run_one_op, apply_op, _apply_whole

RECIPE = """\
project_name: call_depth
dataset_path: {data}
export_path: {work}/out.jsonl
work_dir: {work}
partition: {{mode: manual, num_of_partitions: 2}}
process:
  - lowercase_mapper:
  - test_call_depth_mapper: {{record: {record}, entry: segment_task, entry_file: engine/execution/ray_dispatch.py}}
"""


def test_a_ray_task_reaches_process_table_within_six_frames(tmp_path, corpus, ray_cluster):
    record = tmp_path / "depths.jsonl"
    path = tmp_path / "recipe.yaml"
    path.write_text(RECIPE.format(data=corpus, work=tmp_path / "work", record=record))
    job_dir = str(prepare_job(load_recipe(str(path)), job_id="depth").job_dir)
    results = run_partitions(ray_cluster, job_dir, 0, [0, 1])
    assert [r.partition_id for r in results] == [0, 1]
    depths = read_depths(str(record))
    assert len(depths) == 2, depths  # one call per partition, each in a Ray worker
    for d in depths:
        assert d["depth"] is not None, f"segment_task is not on the op's stack: {d['path']}"
        chain = " <- ".join(d["path"])
        assert d["depth"] <= MAX_FRAMES, f"{d['depth']} frames from segment_task to process_table: {chain}"
