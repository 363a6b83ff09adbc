"""No secret is written: a run whose Ray connection carries a password, a token and a runtime_env secret,
and whose LLM op takes its API key from an Airflow connection, leaves none of them in any file of the job
directory (checkpoints, events, lineage, the LLM call record, metadata, the Airflow task log that
``dj-airflow run --airflow`` keeps there), nor in the export or the console output.

A real ``dj-airflow run --airflow`` (real Airflow tasks through ``dag.test``, a real local Ray) against a
real local chat-completions server; nothing is mocked."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from airflow_provider_dj.testing.sample_corpus import write_corpus
from tests.integration.crash_helpers import DJ_AIRFLOW, kill_session
from tests.integration.fake_chat_server import FakeChatServer

pytestmark = pytest.mark.integration

API_KEY = "sk-llm-key-from-connection-8c1f"
RAY_PASSWORD = "ray-conn-password-51d2"
RAY_TOKEN = "ray-extra-token-9e07"
RUNTIME_SECRET = "runtime-env-secret-3b44"
SECRETS = (API_KEY, RAY_PASSWORD, RAY_TOKEN, RUNTIME_SECRET)

RECIPE = """\
project_name: no_secret
dataset_path: {data}
export_path: {export}
work_dir: {work}
partition: {{mode: manual, num_of_partitions: 2}}
process:
  - whitespace_normalization_mapper:
  - llm_api_mapper:
      conn_id: my_llm
      model: fake-1
      prompt_template: "Q: {{text}}"
      timeout_s: 10
"""


def _files_holding(root: str, needles: tuple[str, ...]) -> list[tuple[str, str]]:
    hits = []
    for d, dirs, files in os.walk(root):
        for name in dirs + files:
            hits += [(os.path.join(d, name), n) for n in needles if n in name]
        for name in files:
            with open(os.path.join(d, name), "rb") as fh:
                data = fh.read()
            hits += [(os.path.join(d, name), n) for n in needles if n.encode() in data]
    return hits


def test_no_secret_of_a_connection_reaches_any_file_or_log(tmp_path):
    server = FakeChatServer().start()
    try:
        data = write_corpus(str(tmp_path / "data" / "in.jsonl"), 40, seed=3)
        recipe = tmp_path / "recipe.yaml"
        export = tmp_path / "out" / "clean.jsonl"
        recipe.write_text(RECIPE.format(data=data, export=export, work=tmp_path / "work"))
        env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "OPENAI_API_KEY")}
        env.update(
            {
                "AIRFLOW_HOME": str(tmp_path / "airflow"),
                "AIRFLOW_CONN_MY_LLM": json.dumps({"conn_type": "http", "host": server.base_url, "password": API_KEY}),
                "AIRFLOW_CONN_RAY_DEFAULT": json.dumps(
                    {
                        "conn_type": "ray",
                        "password": RAY_PASSWORD,
                        "extra": {"token": RAY_TOKEN, "runtime_env": {"env_vars": {"DJ_TEST_SECRET": RUNTIME_SECRET}}},
                    }
                ),
            }
        )
        proc = subprocess.Popen(
            [DJ_AIRFLOW, "run", str(recipe), "--airflow", "--job-id", "secretjob"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=tmp_path,
            start_new_session=True,
        )
        try:
            out, _ = proc.communicate(timeout=400)
        finally:
            kill_session(proc.pid)
        text = out.decode("utf-8", "replace")
        assert proc.returncode == 0, text[-4000:]
    finally:
        server.stop()
    assert server.auth_headers and set(server.auth_headers) == {f"Bearer {API_KEY}"}  # the key was used
    rows = [json.loads(line) for line in export.read_text().splitlines()]
    assert len(rows) == 40 and all(r["llm_answer"].startswith("answer to: Q: ") for r in rows)
    job_dir = tmp_path / "work" / "secretjob"
    logs = [p for p in job_dir.rglob("*.log")]
    assert logs, "the Airflow task log of the run was not kept in the job directory"
    assert (job_dir / "job_summary.json").exists() and list(job_dir.glob("events_*.jsonl"))
    assert [s for s in SECRETS if s in text] == []
    assert _files_holding(str(job_dir), SECRETS) == []
    assert _files_holding(str(tmp_path / "out"), SECRETS) == []
    assert (
        _files_holding(str(tmp_path / "airflow" / "logs"), SECRETS) == []
        if (tmp_path / "airflow" / "logs").exists()
        else True
    )


def test_no_secret_of_the_ray_connection_reaches_the_job_or_the_task_logs_under_dag_test(
    tmp_path, monkeypatch, caplog, capfd, run_dag, airflow_home
):
    """The Ray connection again under ``dag.test()`` in this process, where the tasks' hook reads
    ``ray_default`` (its unknown extras are named in a warning, never their values) and the task logs are
    this process's log records and output.  No LLM op here: this session's Ray workers started before the
    test set its connections, so they could not read one (the console-script test above covers the key)."""
    import logging

    data = write_corpus(str(tmp_path / "data" / "in.jsonl"), 30, seed=4)
    recipe = tmp_path / "no_secret_dag.yaml"
    export = tmp_path / "out" / "clean.jsonl"
    text = RECIPE.replace("project_name: no_secret", "project_name: no_secret_dag")
    text = text[: text.index("  - llm_api_mapper:")]
    recipe.write_text(text.format(data=data, export=export, work=tmp_path / "work"))
    monkeypatch.setenv(
        "AIRFLOW_CONN_RAY_DEFAULT",
        json.dumps({"conn_type": "ray", "password": RAY_PASSWORD, "extra": {"token": RAY_TOKEN}}),
    )
    with caplog.at_level(logging.INFO):
        dag_run = run_dag(str(recipe), conf={"job_id": "secretdag"})
    out, err = capfd.readouterr()
    logged = caplog.text + out + err
    assert dag_run.state == "success", logged[-3000:]
    assert "ignoring unsupported Ray connection extras ['token']" in logged  # the connection was read
    assert len(export.read_text().splitlines()) == 30
    assert [s for s in SECRETS if s in logged] == []
    assert _files_holding(str(tmp_path / "work" / "secretdag"), SECRETS) == []
    assert _files_holding(str(tmp_path / "out"), SECRETS) == []
