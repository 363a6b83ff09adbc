"""The job directory's building blocks on a real S3-compatible server (moto_server on loopback).

Each test drives one engine module (storage, events, checkpoints, runner
lock, storage credentials) against the server through s3fs, in this
process, and checks the objects that land in the bucket.  Nothing here is
mocked; the server is real HTTP on 127.0.0.1 (tests/integration/moto_s3.py).
"""

from __future__ import annotations

import json
import uuid

import pyarrow as pa
import pytest

from tests.integration.moto_s3 import SECRET_KEY, s3_env, s3_server  # noqa: F401 - fixtures

pytestmark = pytest.mark.integration


def _prefix() -> str:
    return f"prim/{uuid.uuid4().hex[:8]}"


def test_atomic_write_read_and_listing_see_other_writers_at_once(s3_env):
    from airflow_provider_dj.core import fs as storage

    base = s3_env.url(_prefix())
    storage.atomic_write_bytes(storage.join(base, "a.json"), b'{"a": 1}')
    assert storage.read_bytes(storage.join(base, "a.json")) == b'{"a": 1}'
    assert storage.listdir(base) == ["a.json"]
    # Another writer (boto3, not s3fs) adds an object: the next listing must show it (no listings cache).
    key = base.split("/", 3)[3]
    s3_env.put(f"{key}/b.json", b"{}")
    assert storage.listdir(base) == ["a.json", "b.json"]
    assert storage.exists(storage.join(base, "b.json"))
    storage.remove(storage.join(base, "a.json"))
    assert storage.listdir(base) == ["b.json"]
    storage.remove_tree(base)
    assert storage.listdir(base) == [] and s3_env.keys(key) == []


def test_atomic_file_writer_uploads_only_on_success(s3_env):
    from airflow_provider_dj.core import fs as storage

    key = f"{_prefix()}/export.jsonl"
    with pytest.raises(RuntimeError):
        with storage.AtomicFileWriter(s3_env.url(key)) as fh:
            fh.write(b'{"x": 1}\n')
            raise RuntimeError("writer dies mid-export")
    assert s3_env.keys(key) == []  # nothing half-written is visible
    with storage.AtomicFileWriter(s3_env.url(key)) as fh:
        fh.write(b'{"x": 1}\n{"x": 2}\n')
    assert s3_env.get(key) == b'{"x": 1}\n{"x": 2}\n'


def test_event_logs_of_one_process_never_overwrite_each_other(s3_env, monkeypatch):
    from airflow_provider_dj.engine.jobdir import events

    monkeypatch.setattr(events, "REMOTE_ROLL_BYTES", 600)  # force several parts per writer
    prefix = _prefix()
    job_dir = s3_env.url(prefix)
    a = events.EventLog(job_dir, "job1")
    b = events.EventLog(job_dir, "job1")  # same process, same writer name: separate objects
    for i in range(6):
        a.emit("op_start", partition_id=0, op_index=i)
        b.emit("op_complete", partition_id=1, op_index=i)
    got = events.read_events(job_dir)
    assert len(got) == 12
    assert [e["op_index"] for e in got if e["partition_id"] == 0] == list(range(6))
    assert [e["op_index"] for e in got if e["partition_id"] == 1] == list(range(6))
    names = [k.rsplit("/", 1)[1] for k in s3_env.keys(prefix)]
    assert len(names) > 2 and all(n.startswith("events_") and n.endswith(".jsonl") for n in names)
    assert all(len(s3_env.get(f"{prefix}/{n}")) <= 600 for n in names)


def test_checkpoint_without_marker_or_with_torn_data_is_not_trusted(s3_env):
    from airflow_provider_dj.engine.storage.checkpoints import CheckpointStore

    prefix = _prefix()
    store = CheckpointStore(s3_env.url(prefix))
    table = pa.table({"text": ["a", "b", "c"]})
    args = dict(op_index=0, op_name="m", partition_id=0, partition_hash="h", fingerprint="f")
    store.save(table=table, accounting=[], op_index=0, op_name="m", partition_id=0, partition_hash="h", fingerprint="f")
    loaded = store.load_valid(0, "m", 0, "h", "f")
    assert loaded is not None and loaded.table.to_pylist() == table.to_pylist()
    data_key = f"{prefix}/checkpoints/checkpoint_op_000_m/partition_00000.parquet"
    marker_key = f"{prefix}/checkpoints/checkpoint_op_000_m/partition_00000.commit.json"
    s3_env.put(data_key, s3_env.get(data_key)[:20])  # torn data under a valid marker
    assert store.load_valid(*args.values()) is None
    s3_env.client().delete_object(Bucket=s3_env.bucket, Key=marker_key)
    store.save(table=table, accounting=[], **args)  # rewrite, then lose the marker: data alone is not trusted
    s3_env.client().delete_object(Bucket=s3_env.bucket, Key=marker_key)
    assert s3_env.keys(data_key) == [data_key]
    assert store.load_valid(*args.values()) is None


def test_runner_lock_on_s3(s3_env):
    from airflow_provider_dj.engine.jobdir import lock as job_lock

    job_dir = s3_env.url(_prefix())
    me = job_lock.owner_identity("run_a")
    assert job_lock.acquire(job_dir, me) == "acquired"
    with pytest.raises(job_lock.JobLockedError, match="another runner"):
        job_lock.acquire(job_dir, job_lock.owner_identity("run_b"))
    job_lock.release(job_dir, "run_a")
    assert job_lock.read_lock(job_dir) is None


def test_credentials_from_an_airflow_connection_never_shown(s3_server, monkeypatch):
    """The endpoint comes only from the connection's extra: if it were ignored, s3fs would try AWS and fail."""
    from airflow_provider_dj.core import fs as storage
    from airflow_provider_dj.core import storage_options

    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(k, raising=False)
    conn = {
        "conn_type": "aws",
        "login": "AKIACONNKEY",
        "password": SECRET_KEY,
        "extra": {"endpoint_url": s3_server.endpoint, "region_name": "us-east-1", "verify": False},
    }
    monkeypatch.setenv("AIRFLOW_CONN_DJ_S3_TEST", json.dumps(conn))
    monkeypatch.setenv(storage_options.CONN_ENV, "dj_s3_test")
    storage_options.clear_cache()
    try:
        url = s3_server.url(f"{_prefix()}/x.json")
        storage.atomic_write_bytes(url, b"hello")
        assert storage.read_bytes(url) == b"hello"
        opts = storage_options.options_for(url)
        assert opts.kwargs()["client_kwargs"] == {"endpoint_url": s3_server.endpoint, "region_name": "us-east-1"}
        assert "verify" not in opts.kwargs()  # extra keys are allowlisted, never spread into the client
        assert SECRET_KEY not in repr(opts) and SECRET_KEY not in str(opts)
        fs, _ = storage.get_fs(url)
        assert SECRET_KEY not in repr(fs)
        # A connection that cannot be found: a clear error naming the setting, without any secret.
        monkeypatch.setenv(storage_options.CONN_ENV, "no_such_conn")
        storage_options.clear_cache()
        with pytest.raises(storage_options.StorageConfigError, match="DJ_STORAGE_CONN_ID='no_such_conn'") as err:
            storage.read_bytes(url)
        assert SECRET_KEY not in str(err.value)
    finally:
        storage_options.clear_cache()


def test_recipe_keeps_urls_and_refuses_unknown_protocols(tmp_path):
    from airflow_provider_dj.engine.config.recipe import RecipeError, parse_recipe

    data = {
        "dataset_path": "data/in.jsonl",
        "export_path": "s3://bkt/out/result.jsonl",
        "process": ["whitespace_normalization_mapper"],
    }
    r = parse_recipe(dict(data), base_dir=str(tmp_path))
    assert r.export_path == "s3://bkt/out/result.jsonl"
    assert r.work_dir == "s3://bkt/out"  # the export's directory, not a mangled local path
    assert r.dataset_path == str(tmp_path / "data" / "in.jsonl")
    r = parse_recipe(
        dict(data, work_dir="s3://bkt/work/../w", dataset_path="s3://bkt/in/*.jsonl"), base_dir=str(tmp_path)
    )
    assert r.work_dir == "s3://bkt/work/../w" and r.dataset_path == "s3://bkt/in/*.jsonl"
    with pytest.raises(RecipeError, match="work_dir.*nosuchproto"):
        parse_recipe(dict(data, work_dir="nosuchproto://x/y"), base_dir=str(tmp_path))


def test_retention_deletes_on_s3(s3_env):
    """Retention after a successful export: per-partition and whole-directory deletes on the bucket."""
    from types import SimpleNamespace

    from airflow_provider_dj.core import fs as storage
    from airflow_provider_dj.engine.job.retention import apply_retention
    from airflow_provider_dj.engine.storage.checkpoints import CheckpointStore

    prefix = _prefix()
    job_dir = s3_env.url(prefix)
    store = CheckpointStore(job_dir)
    for pid in (0, 1):
        for op in (0, 1):
            store.save(
                op_index=op,
                op_name="m",
                partition_id=pid,
                table=pa.table({"t": ["x"]}),
                partition_hash="h",
                fingerprint="f",
                accounting=[{"failed": pid}],
            )
    storage.atomic_write_bytes(storage.join(job_dir, "checkpoints", "partitioning_info.json"), b"{}")
    markers = {pid: store.read_marker(1, "m", pid) for pid in (0, 1)}

    def ctx(policy):
        st = SimpleNamespace(preserve_intermediate_data=False, retention_policy=policy)
        return SimpleNamespace(job_dir=job_dir, recipe=SimpleNamespace(intermediate_storage=st))

    apply_retention(ctx("keep_failed_only"), markers)
    left = [k[len(prefix) + 1 :] for k in s3_env.keys(prefix)]
    assert sorted(left) == [
        "checkpoints/checkpoint_op_000_m/partition_00001.commit.json",
        "checkpoints/checkpoint_op_000_m/partition_00001.parquet",
        "checkpoints/checkpoint_op_001_m/partition_00001.commit.json",
        "checkpoints/checkpoint_op_001_m/partition_00001.parquet",
        "checkpoints/partitioning_info.json",
    ]
    apply_retention(ctx("cleanup_all"), markers)
    assert [k[len(prefix) + 1 :] for k in s3_env.keys(prefix)] == ["checkpoints/partitioning_info.json"]
