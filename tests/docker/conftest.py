"""Fixtures for the Docker stack test: skip, with the reason, where no engine runs.

pytest-docker's ``docker_services`` runs ``docker compose up`` at fixture set-up;
without an engine that would be an error rather than a skip, so
``docker_engine`` is requested first and skips when ``docker info`` fails or
the compose plugin is missing (this machine has the Docker client only).
"""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.ports import free_port

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _engine_problem() -> str | None:
    try:
        info = subprocess.run(
            ["docker", "info", "--format", "{{.ServerVersion}}"], capture_output=True, text=True, timeout=20
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"docker client not usable: {exc}"
    if info.returncode != 0 or not info.stdout.strip():
        return (
            "no Docker engine is running (`docker info` failed: "
            + (info.stderr.strip().splitlines() or ["?"])[-1]
            + ")"
        )
    compose = subprocess.run(["docker", "compose", "version"], capture_output=True, text=True, timeout=20)
    if compose.returncode != 0:
        return "the Docker Compose v2 plugin is not installed (`docker compose version` failed)"
    return None


@pytest.fixture(scope="session")
def docker_engine() -> None:
    problem = _engine_problem()
    if problem:
        pytest.skip(f"Docker stack test skipped: {problem}")


@pytest.fixture(scope="session")
def stack_env(tmp_path_factory, docker_engine) -> dict:
    """Environment the compose file reads: a host work dir we can inspect, our uid, free API and Ray
    dashboard ports (another stack or a local Ray may hold the defaults)."""
    work = tmp_path_factory.mktemp("compose_work")
    os.chmod(work, 0o777)
    env = {
        "DJ_WORK_HOST_DIR": str(work),
        "AIRFLOW_UID": str(os.getuid()),
        "DJ_API_PORT": str(free_port()),
        "DJ_RAY_DASHBOARD_PORT": str(free_port()),
    }
    os.environ.update(env)
    return env


@pytest.fixture(scope="session")
def docker_compose_file(stack_env) -> str:
    return os.path.join(ROOT, "docker", "docker-compose.yaml")


@pytest.fixture(scope="session")
def docker_compose_project_name() -> str:
    return f"djtest{os.getpid()}"


@pytest.fixture(scope="session")
def docker_setup() -> list[str]:
    return ["up --build -d --wait"]
