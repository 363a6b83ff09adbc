"""Whole jobs with ``work_dir`` and ``export_path`` on S3 (moto_server on loopback, started by the test).

``dj-airflow run`` runs in a subprocess session (the engine with its own
private Ray, s3fs against the server in the Ray workers) and the results are compared with a
local-disk run of the same recipe:

* a clean run on S3 exports an object byte-identical to the local export,
  with the summary, commit markers and event objects in the bucket;
* a ``kill -9`` of the whole run between a checkpoint's data object and
  its commit marker (input also on S3, credentials from an Airflow
  connection) leaves an untrusted data object; ``--resume`` recomputes it
  and exports the identical result;
* the secret access key appears in no log and no object of the job.

Nothing is mocked: moto's server speaks the S3 REST API over HTTP.
"""

from __future__ import annotations

import json

import pytest

from tests.integration.conftest import RECIPE
from tests.integration.crash_helpers import run_cli, tail
from tests.integration.moto_s3 import ACCESS_KEY, REGION, SECRET_KEY, s3_server  # noqa: F401 - fixture

pytestmark = pytest.mark.integration

CLI_FLAGS = ["--num-cpus", "1"]
OPS = [
    "clean_email_mapper",
    "whitespace_normalization_mapper",
    "words_num_filter",
    "text_length_filter",
    "document_deduplicator",
]
PARTS = 2


def _recipe(path, name: str, data: str, export: str, work: str) -> str:
    path.write_text(RECIPE.format(name=name, data=data, export=export, work=work, parts=PARTS, strategy="every_op"))
    return str(path)


@pytest.fixture(scope="module")
def local_ref(tmp_path_factory, corpus, airflow_home):
    """The same recipe on local disk: the export every S3 run must reproduce byte for byte."""
    root = tmp_path_factory.mktemp("s3_ref")
    recipe = _recipe(root / "s3_ref.yaml", "s3_ref", corpus, str(root / "ref_out.jsonl"), str(root / "work"))
    run = run_cli(
        ["run", recipe, "--job-id", "ref", *CLI_FLAGS], str(root / "ref.log"), env_extra={"DJ_TASK_RETRIES": "0"}
    )
    assert run.rc == 0, tail(run.output)
    with open(root / "work" / "ref" / "job_summary.json") as fh:
        summary = json.load(fh)
    return (root / "ref_out.jsonl").read_bytes(), summary


def _env_credentials(server) -> dict:
    return dict(server.env(), DJ_TASK_RETRIES="0")


def _connection_credentials(server) -> dict:
    """Credentials and endpoint only through an Airflow connection (AWS_* variables blanked)."""
    conn = {
        "conn_type": "aws",
        "login": ACCESS_KEY,
        "password": SECRET_KEY,
        "extra": {"endpoint_url": server.endpoint, "region_name": REGION},
    }
    return {
        "DJ_TASK_RETRIES": "0",
        "DJ_STORAGE_CONN_ID": "dj_s3",
        "AIRFLOW_CONN_DJ_S3": json.dumps(conn),
        "AWS_DEFAULT_REGION": REGION,
    }


def _assert_no_secret(server, prefix: str, *logs: str) -> None:
    for text in logs:
        assert SECRET_KEY not in text
    for key in server.keys(prefix):
        assert SECRET_KEY.encode() not in server.get(key), f"secret written into s3://{server.bucket}/{key}"


def _markers(server, job_prefix: str) -> set[str]:
    return {
        k[len(job_prefix) + len("/checkpoints/") :]
        for k in server.keys(job_prefix + "/checkpoints/")
        if k.endswith(".commit.json")
    }


@pytest.fixture(autouse=True)
def _no_ambient_aws(monkeypatch):
    """The CLI runs inherit this environment: only what a test passes may reach them."""
    for k in (
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_ENDPOINT_URL",
        "AWS_ENDPOINT_URL_S3",
        "AWS_PROFILE",
        "DJ_STORAGE_CONN_ID",
    ):
        monkeypatch.delenv(k, raising=False)


def test_run_on_s3_exports_what_a_local_run_exports(s3_server, local_ref, corpus, tmp_path, monkeypatch):
    ref_export, ref_summary = local_ref
    recipe = _recipe(
        tmp_path / "s3_clean.yaml",
        "s3_clean",
        corpus,
        s3_server.url("clean/out/result.jsonl"),
        s3_server.url("clean/work"),
    )
    run = run_cli(
        ["run", recipe, "--job-id", "job1", *CLI_FLAGS],
        str(tmp_path / "run.log"),
        env_extra=_env_credentials(s3_server),
    )
    assert run.rc == 0, tail(run.output)
    assert s3_server.get("clean/out/result.jsonl") == ref_export

    job = "clean/work/job1"
    summary = json.loads(s3_server.get(f"{job}/job_summary.json"))
    assert summary["status"] == "completed"
    assert summary["export"]["rows"] == ref_summary["export"]["rows"] > 0
    assert summary["export"]["checksum_xxh3_128"] == ref_summary["export"]["checksum_xxh3_128"]
    assert [(o["rows_in"], o["rows_out"]) for o in summary["ops"]] == [
        (o["rows_in"], o["rows_out"]) for o in ref_summary["ops"]
    ]
    markers = _markers(s3_server, job)
    for i, op in enumerate(OPS):
        for p in range(PARTS):
            assert f"checkpoint_op_{i:03d}_{op}/partition_{p:05d}.commit.json" in markers
    keys = s3_server.keys(job)
    assert not [k for k in keys if ".tmp" in k]  # no temp names on an object store
    assert f"{job}/metadata/runner.lock" not in keys  # released at export
    assert "success in" in run.output  # the CLI read the summary back from S3

    from airflow_provider_dj.core import storage_options
    from airflow_provider_dj.engine.jobdir.events import read_events

    for k, v in s3_server.env().items():
        monkeypatch.setenv(k, v)
    storage_options.clear_cache()
    try:
        evs = read_events(s3_server.url(job))
    finally:
        storage_options.clear_cache()
    kinds = [e["event_type"] for e in evs]
    assert kinds.count("export_complete") == 1 and "job_complete" in kinds
    assert sum(1 for e in evs if e["event_type"] == "checkpoint_save") >= len(OPS) * PARTS
    _assert_no_secret(s3_server, "clean/", run.output)


def test_kill_mid_checkpoint_then_resume_on_s3_with_input_on_s3(s3_server, local_ref, corpus, tmp_path):
    ref_export, _ = local_ref
    with open(corpus, "rb") as fh:
        s3_server.put("crash/input/corpus.jsonl", fh.read())
    recipe = _recipe(
        tmp_path / "s3_crash.yaml",
        "s3_crash",
        s3_server.url("crash/input/corpus.jsonl"),
        s3_server.url("crash/out/result.jsonl"),
        s3_server.url("crash/work"),
    )
    job = "crash/work/job2"
    op_dir = "checkpoint_op_001_whitespace_normalization_mapper"
    s3_server.put(
        f"{job}/_fault_injection.json",
        json.dumps(
            [
                {
                    "point": "checkpoint_mid_write",
                    "partition_id": 1,
                    "op_index": 1,
                    "store": "checkpoint_op",
                    "kind": "kill_run",
                    "times": 1,
                }
            ]
        ).encode(),
    )
    env = _connection_credentials(s3_server)

    killed = run_cli(["run", recipe, "--job-id", "job2", *CLI_FLAGS], str(tmp_path / "killed.log"), env_extra=env)
    assert killed.killed, tail(killed.output)
    keys = s3_server.keys(job)
    data_key = f"{job}/checkpoints/{op_dir}/partition_00001.parquet"
    marker_key = f"{job}/checkpoints/{op_dir}/partition_00001.commit.json"
    assert data_key in keys and marker_key not in keys  # the kill hit between data object and marker
    assert f"{job}/job_summary.json" not in keys and s3_server.keys("crash/out/") == []
    # Make the orphan visibly wrong: a resume that trusted it would export garbage or fail to decode.
    s3_server.put(data_key, b"PAR1 torn object")

    resumed = run_cli(["run", recipe, "--resume", "job2", *CLI_FLAGS], str(tmp_path / "resumed.log"), env_extra=env)
    assert resumed.rc == 0, tail(resumed.output)
    assert s3_server.get("crash/out/result.jsonl") == ref_export
    marker = json.loads(s3_server.get(marker_key))
    assert marker["size"] == len(s3_server.get(data_key)) != len(b"PAR1 torn object")
    summary = json.loads(s3_server.get(f"{job}/job_summary.json"))
    assert summary["status"] == "completed"
    for i, op in enumerate(OPS):
        assert {f"checkpoint_op_{i:03d}_{op}/partition_{p:05d}.commit.json" for p in range(PARTS)} <= _markers(
            s3_server, job
        )
    _assert_no_secret(s3_server, "crash/", killed.output, resumed.output)
