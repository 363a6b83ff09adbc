"""A real S3-compatible server on loopback for object-store tests: ``moto_server`` in a subprocess.

moto's server mode speaks the S3 REST API over HTTP, so s3fs/botocore talk
to it exactly as they would to AWS or MinIO (signing, multipart, listing):
nothing in the provider is mocked.  The server binds 127.0.0.1 on a free
port, is started once per test module and killed at teardown.  The
credentials are made up (moto accepts any); tests use a distinctive secret
so they can grep logs and job files for it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass

import pytest

from tests.ports import free_port

MOTO_SERVER = os.path.join(os.path.dirname(sys.executable), "moto_server")
ACCESS_KEY = "AKIADJTESTKEY0000001"
SECRET_KEY = "dj-test-secret-Zq8v1N0tInLogs"  # grep target: must never appear in logs or job files
REGION = "us-east-1"


@dataclass
class S3Server:
    endpoint: str
    bucket: str
    log_path: str

    def env(self) -> dict[str, str]:
        """Environment for a process that should reach the bucket (credentials from the environment)."""
        return {
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_DEFAULT_REGION": REGION,
            "AWS_ENDPOINT_URL": self.endpoint,
        }

    def client(self):
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            region_name=REGION,
        )

    def keys(self, prefix: str = "") -> list[str]:
        out: list[str] = []
        for page in self.client().get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
            out.extend(o["Key"] for o in page.get("Contents", []))
        return sorted(out)

    def get(self, key: str) -> bytes:
        return self.client().get_object(Bucket=self.bucket, Key=key)["Body"].read()

    def put(self, key: str, data: bytes) -> None:
        self.client().put_object(Bucket=self.bucket, Key=key, Body=data)

    def url(self, key: str) -> str:
        return f"s3://{self.bucket}/{key}"


@pytest.fixture(scope="module")
def s3_server(tmp_path_factory):
    """A started moto S3 server with one empty bucket; killed at teardown."""
    port = free_port()
    log_path = str(tmp_path_factory.mktemp("moto") / "moto_server.log")
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [MOTO_SERVER, "-H", "127.0.0.1", "-p", str(port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(endpoint + "/moto-api/", timeout=1).read()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    with open(log_path, encoding="utf-8", errors="replace") as fh:
                        raise RuntimeError(f"moto_server did not start on {endpoint}:\n{fh.read()[-3000:]}") from None
                time.sleep(0.2)
        server = S3Server(endpoint=endpoint, bucket="dj-test-bucket", log_path=log_path)
        server.client().create_bucket(Bucket=server.bucket)
        yield server
    finally:
        proc.kill()
        proc.wait(timeout=30)


@pytest.fixture
def s3_env(s3_server, monkeypatch):
    """This process reaches the bucket through the AWS environment variables."""
    from airflow_provider_dj.core import storage_options

    for k, v in s3_server.env().items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv(storage_options.CONN_ENV, raising=False)
    storage_options.clear_cache()
    yield s3_server
    storage_options.clear_cache()
