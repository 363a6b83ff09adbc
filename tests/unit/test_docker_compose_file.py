"""The deployment files in docker/ cannot rot silently.

No Docker engine runs here, so the stack itself is exercised only where one
does (tests/docker/).  This test reads the compose file, the Dockerfile,
pyproject.toml and the compose recipe as data and checks what a broken
deployment would get wrong: missing services, a work dir not shared by every
node, Airflow not pointed at PostgreSQL, a recipe whose paths lie outside the
mounts, a Ray command swallowed by the Airflow entrypoint, and the Ray Jobs
wiring: the `ray_default` connection, read by the provider's own code (Airflow's
lookup of AIRFLOW_CONN_RAY_DEFAULT, then RayHook.resolve), must select Ray Jobs
mode at the head's dashboard, which the head must start, publish on the port the
connection names and be able to serve (Ray's dashboard extra in the image), and
the drivers must run with the image's provider Python.
"""

from __future__ import annotations

import os
import re
import urllib.parse

import pytest
import yaml

from airflow_provider_dj.engine.config.recipe import load_recipe
from tests.helpers_deploy import dockerfile_text, image_python, resolve_ray_connection

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOCKER = os.path.join(ROOT, "docker")
AIRFLOW_SERVICES = {"airflow-apiserver", "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer"}
RAY_SERVICES = {"ray-head", "ray-worker"}
WORK_MOUNT = "/opt/dj/work"


@pytest.fixture(scope="module")
def compose() -> dict:
    with open(os.path.join(DOCKER, "docker-compose.yaml"), encoding="utf-8") as fh:
        return yaml.safe_load(fh)


def _mounts(service: dict) -> dict[str, str]:
    """container path -> source, from short-syntax volume strings."""
    out = {}
    for v in service.get("volumes", []):
        # The source may be a ${VAR:-default} expression, which has a colon of its own.
        m = re.fullmatch(r"(\$\{[^}]*\}|[^:]+):([^:]+)(?::(?:ro|rw))?", v)
        assert m, f"unparsable volume {v!r}"
        out[m.group(2)] = m.group(1)
    return out


def test_all_services_present(compose):
    expected = AIRFLOW_SERVICES | RAY_SERVICES | {"postgres", "airflow-init"}
    assert expected <= set(compose["services"]), sorted(expected - set(compose["services"]))


def test_one_image_for_airflow_and_ray(compose):
    images = {name: compose["services"][name]["image"] for name in AIRFLOW_SERVICES | RAY_SERVICES | {"airflow-init"}}
    assert len(set(images.values())) == 1, images
    for name in AIRFLOW_SERVICES | RAY_SERVICES:
        assert compose["services"][name]["build"]["dockerfile"] == "docker/Dockerfile"


def test_work_dir_shared_by_every_node(compose):
    sources = set()
    for name in AIRFLOW_SERVICES | RAY_SERVICES:
        mounts = _mounts(compose["services"][name])
        assert WORK_MOUNT in mounts, f"{name} does not mount the work dir at {WORK_MOUNT}"
        sources.add(mounts[WORK_MOUNT])
    assert len(sources) == 1, f"services mount different work dirs: {sources}"
    assert "dj-work" in compose["volumes"]


def test_airflow_env_points_at_postgres_and_ray(compose):
    for name in AIRFLOW_SERVICES | {"airflow-init"}:
        env = compose["services"][name]["environment"]
        assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].startswith("postgresql+psycopg2://")
        assert "@postgres:5432/" in env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
        assert env["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor"
        assert env["DJ_WORK_DIR"] == WORK_MOUNT


def _flags(command: list[str]) -> dict[str, str]:
    """``--name=value`` arguments of a command as {name: value} (``--flag`` alone: "")."""
    out = {}
    for arg in command:
        if arg.startswith("--"):
            name, _, value = arg[2:].partition("=")
            out[name] = value
    return out


def test_ray_connection_selects_ray_jobs_mode_at_the_heads_dashboard(compose, monkeypatch):
    envs = {name: compose["services"][name]["environment"] for name in AIRFLOW_SERVICES}
    conns = {env["AIRFLOW_CONN_RAY_DEFAULT"] for env in envs.values()}
    assert len(conns) == 1, "every Airflow service, the triggerer too, must see the same ray_default"
    cfg = resolve_ray_connection(conns.pop(), monkeypatch)
    head = _flags(compose["services"]["ray-head"]["command"])

    assert cfg["mode"] == "jobs"
    dashboard = urllib.parse.urlsplit(cfg["dashboard_address"])
    assert dashboard.scheme == "http" and dashboard.hostname == "ray-head"
    assert dashboard.port == int(head["dashboard-port"])
    # The steps that stay in the Airflow task reach the same head's GCS, where the worker joins.
    assert cfg["address"] == f"ray-head:{head['port']}"
    assert _flags(compose["services"]["ray-worker"]["command"])["address"] == cfg["address"]
    # The drivers run with the image's provider environment, whatever PATH Ray was started with.
    assert cfg["entrypoint_python"] == image_python()
    assert cfg["init_kwargs"] == {"namespace": "dj"}


def test_ray_head_serves_its_dashboard_on_the_connections_port(compose):
    head = compose["services"]["ray-head"]
    flags = _flags(head["command"])
    assert flags["include-dashboard"] == "true"
    assert flags["dashboard-host"] == "0.0.0.0", "the dashboard must answer other containers, not loopback"
    port = flags["dashboard-port"]
    # Published for a browser on this host's loopback only (it runs whatever is submitted to it).
    published = [p for p in head["ports"] if p.rsplit(":", 1)[1] == port]
    assert published and all(p.startswith("127.0.0.1:") for p in head["ports"]), head["ports"]
    # Healthy only when the job API answers; every Airflow service (the triggerer too) waits for it.
    assert f"http://localhost:{port}/api/version" in " ".join(head["healthcheck"]["test"])
    for name in AIRFLOW_SERVICES:
        assert compose["services"][name]["depends_on"]["ray-head"]["condition"] == "service_healthy"


def test_image_has_the_dashboard_and_a_provider_python():
    import tomllib  # Python 3.11+, as the test environment is

    text = dockerfile_text()
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as fh:
        extras = tomllib.load(fh)["project"]["optional-dependencies"]
    assert any(req.replace(" ", "").startswith("ray[default]") for req in extras["ray-cluster"])
    install = re.search(r'spec="\.\[ray-cluster\$\{DJ_EXTRAS:\+,\$\{DJ_EXTRAS\}\}\]"', text)
    assert install, "the image must install the ray-cluster extra whatever DJ_EXTRAS adds"
    # The build imports the provider and Ray's dashboard dependencies with the very Python the
    # connection names, so a wrong path or a missing extra fails the build, not a submission.
    assert 'RUN "${DJ_PYTHON}" -c "import airflow_provider_dj, ray.dashboard.optional_deps"' in text


def test_ray_nodes_start_ray_not_airflow(compose):
    head, worker = compose["services"]["ray-head"], compose["services"]["ray-worker"]
    for svc in (head, worker):
        assert svc["entrypoint"] == ["ray"], "the Airflow image's entrypoint would run `airflow ray ...`"
        assert svc["command"][0] == "start" and "--block" in svc["command"]
    assert "--head" in head["command"] and "--port=6379" in head["command"]
    assert "--address=ray-head:6379" in worker["command"]
    assert worker["depends_on"]["ray-head"]["condition"] == "service_healthy"


def test_airflow_waits_for_db_migration(compose):
    assert compose["services"]["airflow-init"]["command"] == ["airflow", "db", "migrate"]
    for name in AIRFLOW_SERVICES:
        deps = compose["services"][name]["depends_on"]
        assert deps["airflow-init"]["condition"] == "service_completed_successfully"
        assert deps["postgres"]["condition"] == "service_healthy"


def test_compose_recipe_paths_lie_in_mounts(compose):
    recipe = load_recipe(os.path.join(DOCKER, "recipes", "demo_compose.yaml"))
    mounts = _mounts(compose["services"]["airflow-scheduler"])
    assert recipe.export_path.startswith(WORK_MOUNT + "/")
    assert recipe.work_dir.startswith(WORK_MOUNT + "/")
    data_src = mounts.get("/opt/dj/data")
    assert data_src is not None, "the corpus folder is not mounted"
    # The mounted corpus folder holds the file the recipe reads.
    host_data = os.path.normpath(os.path.join(DOCKER, data_src))
    assert os.path.exists(os.path.join(host_data, os.path.basename(recipe.dataset_path)))


def test_dockerfile_installs_the_provider_and_dag_file():
    text = dockerfile_text()
    assert re.search(r"^FROM apache/airflow:\$\{AIRFLOW_VERSION\}", text, re.M)
    assert "COPY --chown=airflow:root airflow_provider_dj" in text
    assert "dags/dj_recipes.py /opt/airflow/dags/" in text
    assert '"apache-airflow==${AIRFLOW_VERSION}"' in text, "pip could upgrade Airflow under the base image"
    for copied in ("pyproject.toml", "airflow_provider_dj", "dags/dj_recipes.py"):
        assert os.path.exists(os.path.join(ROOT, copied)), copied


def test_auth_password_file_matches_configured_user(compose):
    env = compose["services"]["airflow-apiserver"]["environment"]
    user = env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS"].split(":")[0]
    with open(os.path.join(DOCKER, "config", "simple_auth_manager_passwords.json"), encoding="utf-8") as fh:
        assert user in yaml.safe_load(fh)
