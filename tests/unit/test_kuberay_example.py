"""The KubeRay example (docker/kuberay/) cannot rot silently.

No Kubernetes cluster and no KubeRay operator run here, so nothing is applied:
the manifests, the Airflow Helm chart's values and the example recipe are read as
data and compared with what the code that consumes them expects.  The
`ray_default` connection is fed to the provider's own reading of it (Airflow's
connection lookup, then RayHook.resolve) and must select Ray Jobs mode at exactly
the head Service name KubeRay derives from the RayCluster's metadata (KubeRay's
GenerateHeadServiceName: ``<metadata.name>-head-svc`` unless
``headGroupSpec.headService`` names one; FQDN ``<svc>.<namespace>.svc.cluster.local``),
on the ports the head's container declares and its ``rayStartParams`` start.
Head and workers must run one image, the one Airflow runs, and mount one
ReadWriteMany claim at the path where the Airflow pods mount it and where the
recipe's paths lie.
"""

from __future__ import annotations

import os
import urllib.parse

import pytest
import yaml

from airflow_provider_dj.engine.config.recipe import load_recipe
from tests.helpers_deploy import ROOT, image_python, resolve_ray_connection

KUBERAY = os.path.join(ROOT, "docker", "kuberay")


def _load_all(name: str) -> list[dict]:
    with open(os.path.join(KUBERAY, name), encoding="utf-8") as fh:
        return [doc for doc in yaml.safe_load_all(fh) if doc]


@pytest.fixture(scope="module")
def manifests() -> dict[str, dict]:
    docs = _load_all("raycluster.yaml")
    by_kind = {doc["kind"]: doc for doc in docs}
    assert len(by_kind) == len(docs), "one object of each kind expected"
    return by_kind


@pytest.fixture(scope="module")
def cluster(manifests) -> dict:
    return manifests["RayCluster"]


@pytest.fixture(scope="module")
def values() -> dict:
    (doc,) = _load_all("airflow-values.yaml")
    return doc


def _groups(cluster: dict) -> list[dict]:
    """The head group and every worker group."""
    return [cluster["spec"]["headGroupSpec"], *cluster["spec"]["workerGroupSpecs"]]


def _container(group: dict) -> dict:
    (container,) = group["template"]["spec"]["containers"]
    return container


def _claim_mounts(pod_spec: dict, container: dict) -> dict[str, str]:
    """claim name -> mount path, for the container's mounts of PersistentVolumeClaim volumes."""
    claims = {
        v["name"]: v["persistentVolumeClaim"]["claimName"] for v in pod_spec["volumes"] if "persistentVolumeClaim" in v
    }
    return {claims[m["name"]]: m["mountPath"] for m in container["volumeMounts"] if m["name"] in claims}


def _env(values: dict) -> dict[str, str]:
    return {e["name"]: e["value"] for e in values["env"]}


def head_service_fqdn(cluster: dict) -> str:
    """The head Service's DNS name as KubeRay derives it (utils.GenerateHeadServiceName, GenerateFQDNServiceName)."""
    head = cluster["spec"]["headGroupSpec"]
    name = ((head.get("headService") or {}).get("metadata") or {}).get("name")
    if not name:
        name = f"{cluster['metadata']['name']}-head-svc"
        # KubeRay cuts a longer name from the front (CheckName); an example must not rely on that.
        assert len(name) <= 50, f"{name!r} is longer than KubeRay keeps"
    namespace = cluster["metadata"].get("namespace") or "default"
    return f"{name}.{namespace}.svc.cluster.local"


def _head_port(cluster: dict, port_name: str) -> int:
    ports = {p["name"]: p["containerPort"] for p in _container(cluster["spec"]["headGroupSpec"])["ports"]}
    return ports[port_name]


def test_kind_and_api_version(manifests, cluster):
    assert cluster["apiVersion"] == "ray.io/v1" and cluster["kind"] == "RayCluster"
    assert manifests["PersistentVolumeClaim"]["apiVersion"] == "v1"


def test_head_serves_its_dashboard_on_all_interfaces(cluster):
    params = cluster["spec"]["headGroupSpec"]["rayStartParams"]
    # KubeRay renders every value as `--key=value` and wants strings (a YAML number or bool is refused).
    assert all(isinstance(v, str) for v in params.values()), params
    assert params["include-dashboard"] == "true"
    assert params["dashboard-host"] == "0.0.0.0", "on loopback the dashboard would not answer Airflow's pods"
    # The head Service exposes the container's named ports: the dashboard's must be the one Ray starts.
    assert _head_port(cluster, "dashboard") == int(params["dashboard-port"])
    assert _head_port(cluster, "gcs-server") == int(params.get("port", "6379"))  # KubeRay's default GCS port
    assert cluster["spec"]["workerGroupSpecs"], "a cluster without workers runs no partition"


def test_head_and_workers_run_the_airflow_image(cluster, values):
    images = {_container(group)["image"] for group in _groups(cluster)}
    assert len(images) == 1, f"head and workers run different images: {images}"
    airflow = values["images"]["airflow"]
    assert images == {f"{airflow['repository']}:{airflow['tag']}"}, "the drivers refuse another provider version"
    users = {(g["template"]["spec"]["securityContext"]["runAsUser"]) for g in _groups(cluster)}
    assert users == {values["uid"]}, "checkpoints must stay writable by Ray pods and Airflow pods alike"


def test_one_read_write_many_claim_at_one_path_everywhere(manifests, cluster, values):
    pvc = manifests["PersistentVolumeClaim"]
    assert "ReadWriteMany" in pvc["spec"]["accessModes"]
    assert pvc["metadata"]["namespace"] == cluster["metadata"]["namespace"], "a claim is mounted in its namespace"
    mounts = {_claim_mounts(g["template"]["spec"], _container(g))[pvc["metadata"]["name"]] for g in _groups(cluster)}
    airflow = _claim_mounts(values, {"volumeMounts": values["volumeMounts"]})
    assert mounts == {airflow[pvc["metadata"]["name"]]}, "a driver refuses a job dir it does not see at the same path"
    assert _env(values)["DJ_WORK_DIR"] == mounts.pop()
    for group in _groups(cluster):  # Ray's object store needs more than a container's default /dev/shm
        shm = {
            v["name"] for v in group["template"]["spec"]["volumes"] if v.get("emptyDir", {}).get("medium") == "Memory"
        }
        assert any(m["mountPath"] == "/dev/shm" and m["name"] in shm for m in _container(group)["volumeMounts"])


def test_airflow_connection_selects_ray_jobs_mode_at_the_head_service(cluster, values, monkeypatch):
    cfg = resolve_ray_connection(_env(values)["AIRFLOW_CONN_RAY_DEFAULT"], monkeypatch)
    service = head_service_fqdn(cluster)
    assert service == "dj-ray-head-svc.dj.svc.cluster.local"
    assert cfg["mode"] == "jobs"
    dashboard = urllib.parse.urlsplit(cfg["dashboard_address"])
    assert (dashboard.scheme, dashboard.hostname, dashboard.port) == ("http", service, _head_port(cluster, "dashboard"))
    assert cfg["address"] == f"{service}:{_head_port(cluster, 'gcs-server')}"
    assert cfg["entrypoint_python"] == image_python()


def test_recipe_paths_lie_on_the_work_claim(values):
    env = _env(values)
    work = env["DJ_WORK_DIR"]
    recipes = [f for f in os.listdir(os.path.join(KUBERAY, "recipes")) if f.endswith((".yaml", ".yml"))]
    assert recipes
    for name in recipes:
        recipe = load_recipe(os.path.join(KUBERAY, "recipes", name))
        # The Ray nodes read the input and write checkpoints too: everything on the shared claim.
        for path in (recipe.dataset_path, recipe.export_path, recipe.work_dir):
            assert path.startswith(work + "/"), f"{name}: {path} is not under {work}"
    # The recipes reach the Airflow pods as the ConfigMap the docs create, mounted at DJ_RECIPES_DIR.
    (config_map,) = [v["configMap"]["name"] for v in values["volumes"] if "configMap" in v]
    mount = {m["name"]: m["mountPath"] for m in values["volumeMounts"]}
    volume = next(v["name"] for v in values["volumes"] if "configMap" in v)
    assert mount[volume] == env["DJ_RECIPES_DIR"]
    with open(os.path.join(ROOT, "docs", "deployment.md"), encoding="utf-8") as fh:
        assert f"create configmap {config_map} --from-file=docker/kuberay/recipes/" in fh.read()
