"""``kill -9`` of a worker in the middle of an LLM batch, then ``--resume``: no call is paid twice.

A worker process runs a recipe whose only op is ``llm_api_mapper`` against
the local fake chat server
(tests/integration/fake_chat_server.py).  The server itself SIGKILLs the
run's process session when a chosen request arrives — between two calls of
one batch, where the batch cursor (engine/execution/batch_cursor.py) has not committed
yet, so only the durable call record can save the calls already made.  The
real CLI (Airflow dag.test + its private Ray) then resumes the job.
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys

import pytest

from tests.integration.crash_helpers import kill_session, run_cli, tail
from tests.integration.fake_chat_server import FakeChatServer

pytestmark = pytest.mark.integration

RECIPE = """\
project_name: llm_kill_resume
dataset_path: {data}
export_path: {export}
work_dir: {work}
partition:
  mode: manual
  num_of_partitions: 2
process:
  - llm_api_mapper:
      base_url: {base_url}
      model: fake-1
      prompt_template: "Summarize: {{text}}"
      output_key: summary
      batch_size: 4
      concurrency: 1
      backoff_base_s: 0.05
      timeout_s: 20
"""

WORKER = """
import sys
from airflow_provider_dj.engine.job.setup import prepare_job
from airflow_provider_dj.engine.config.recipe import load_recipe
from airflow_provider_dj.engine.execution.segment_runner import run_segment
job = prepare_job(load_recipe(sys.argv[1]), job_id="llmkill")
run_segment(job.job_dir, 0, 0)
"""


def test_kill_mid_batch_then_resume_pays_each_call_once(tmp_path):
    server = FakeChatServer().start()
    try:
        data = tmp_path / "in.jsonl"
        texts = [f"document number {i} about topic {i % 3}" for i in range(12)]
        data.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
        recipe = tmp_path / "llm.yaml"
        export = tmp_path / "out.jsonl"
        work = tmp_path / "work"
        recipe.write_text(RECIPE.format(data=data, export=export, work=work, base_url=server.base_url))
        server.script("Summarize: " + texts[9], "empty")
        env = dict(os.environ, OPENAI_API_KEY="sk-kill-test-key", DJ_TASK_RETRIES="0")
        env.pop("RAY_ADDRESS", None)

        # 1) a worker runs partition 0 (what a Ray task of the run does: plan the job, run_segment) and dies
        #    (SIGKILL of its session) when request 6 arrives: partition 0 has rows 0-5, batches [0-3] and
        #    [4-5]; row 4's answer is paid and recorded, row 5's request is in flight.  A plain Python
        #    worker instead of a whole first CLI run saves ~20 s of Airflow + Ray start-up.
        log1 = tmp_path / "run1.log"
        with open(log1, "wb") as fh:
            proc = subprocess.Popen(
                [sys.executable, "-c", WORKER, str(recipe)],
                stdout=fh,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
            )
            server.kill_session_at = (6, proc.pid)
            try:
                rc = proc.wait(timeout=240)
            finally:
                kill_session(proc.pid)
        out1 = log1.read_text(errors="replace")
        assert server.killed and rc == -9, tail(out1)
        assert not export.exists()
        job = work / "llmkill"
        assert sum(server.answered.values()) == 5
        cursor = json.loads((job / "batches" / "op_000_llm_api_mapper" / "partition_00000" / "cursor.json").read_text())
        assert [b["end"] for b in cursor["batches"]] == [4]  # batch 1 (rows 4-5) never committed

        # 2) resume: the committed batch is not redone, row 4 comes from the call record, only the rest is paid.
        server.kill_session_at = None
        run2 = run_cli(
            ["run", str(recipe), "--resume", "llmkill", "--num-cpus", "1"],
            str(tmp_path / "run2.log"),
            env_extra={"OPENAI_API_KEY": "sk-kill-test-key", "DJ_TASK_RETRIES": "0"},
        )
        assert run2.rc == 0, tail(run2.output)
        assert {t: server.answered["Summarize: " + t] for t in texts} == {t: 1 for t in texts}
        assert server.received["Summarize: " + texts[5]] == 2  # the killed request, then the paid one
        assert sum(server.received.values()) == 13

        exported = [json.loads(line) for line in export.read_text().splitlines()]
        assert [r["text"] for r in exported] == [t for i, t in enumerate(texts) if i != 9]
        assert all(r["summary"] == "answer to: Summarize: " + r["text"] for r in exported)
        [failed_file] = glob.glob(str(job / "failed" / "op_000_llm_api_mapper" / "partition_*.jsonl"))
        [failed] = [json.loads(line) for line in open(failed_file)]
        assert failed["text"] == texts[9] and failed["__dj__error__"] == "InvalidAnswer: empty answer"
        summary = json.loads((job / "job_summary.json").read_text())
        [op] = summary["ops"]
        assert (op["rows_in"], op["rows_out"], op["failed"]) == (12, 11, 1)
        records = glob.glob(str(job / "llm_calls" / "op_000_llm_api_mapper" / "partition_*" / "calls_*.jsonl"))
        assert len(records) == 3  # partition 0: the killed writer and the resumed one; partition 1: one
        assert not any("sk-kill-test-key" in open(p).read() for p in records)
    finally:
        server.stop()
