"""Shared by the deployment files' tests (tests/unit/test_docker_compose_file.py,
tests/unit/test_kuberay_example.py): what the provider's own code makes of a
deployment's `ray_default` connection, and the image's provider Python.

No Docker engine and no Kubernetes run where these tests run: the files are
read as data and fed to the code that reads them in a real deployment.
"""

from __future__ import annotations

import os
import re

from airflow_provider_dj.hooks.ray import RayHook

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCKERFILE = os.path.join(ROOT, "docker", "Dockerfile")


def resolve_ray_connection(conn_json: str, monkeypatch) -> dict:
    """What a partition task makes of ``conn_json`` as ``ray_default``: Airflow's own connection
    lookup (RayHook.get_connection reads AIRFLOW_CONN_RAY_DEFAULT through the environment secrets
    backend), then RayHook.resolve, which picks the mode and the addresses."""
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("AIRFLOW_CONN_RAY_DEFAULT", conn_json)
    return RayHook().resolve()


def dockerfile_text() -> str:
    with open(DOCKERFILE, encoding="utf-8") as fh:
        return fh.read()


def image_python() -> str:
    """The image's provider Python (the Dockerfile's ``ENV DJ_PYTHON=``), which the build checks."""
    m = re.search(r"^ENV DJ_PYTHON=(\S+)$", dockerfile_text(), re.M)
    assert m, "docker/Dockerfile no longer sets DJ_PYTHON"
    return m.group(1)
