"""Provider metadata is derived from the code and checked against it, so it cannot drift again.

Two things had drifted: the ``ray`` connection form declared three extras
while the hook allowed five, and the deferrable sensor's trigger was not
registered at all.  Each check below derives the expected metadata from the
code itself (the hook's allowlist and what ``resolve()`` does with each key;
the ``BaseTrigger`` subclasses found in ``airflow_provider_dj.triggers``),
and the whole dict is validated against Airflow's own provider-info schema.
"""

from __future__ import annotations

import importlib
import inspect
import json
import pkgutil
from pathlib import Path
from types import SimpleNamespace

import jsonschema
import pytest

import airflow_provider_dj.triggers as triggers_pkg
from airflow_provider_dj.hooks.ray import ALLOWED_EXTRAS, RayHook
from airflow_provider_dj.provider_info import get_provider_info


def _ray_connection_type() -> dict:
    [ct] = [c for c in get_provider_info()["connection-types"] if c["connection-type"] == "ray"]
    return ct


def test_provider_info_matches_airflows_schema():
    import airflow

    schema = json.loads((Path(airflow.__file__).parent / "provider_info.schema.json").read_text())
    jsonschema.validate(get_provider_info(), schema)


def test_conn_fields_are_exactly_the_hooks_allowlist():
    ct = _ray_connection_type()
    assert set(ct["conn-fields"]) == set(ALLOWED_EXTRAS)
    # address, dashboard_address, entrypoint_python, namespace, runtime_env, num_cpus, object_store_memory
    assert len(ALLOWED_EXTRAS) == 7
    for name, field in ct["conn-fields"].items():
        assert field["label"] and field["description"], name
        assert "null" in field["schema"]["type"], f"{name}: an unset extra must be allowed"
    assert ct["hook-class-name"] == f"{RayHook.__module__}.{RayHook.__qualname__}"
    assert ct["connection-type"] == RayHook.conn_type


# One sample value per extra and where resolve() must put it: a declared field the hook ignored
# would be as false as an allowed one the form hides.
SAMPLES = {
    "address": ("ray://head-from-extra:10001", lambda cfg: cfg["address"]),
    "dashboard_address": ("http://head:8265", lambda cfg: cfg["dashboard_address"]),
    "entrypoint_python": ("/opt/venv/bin/python", lambda cfg: cfg["entrypoint_python"]),
    "namespace": ("ns1", lambda cfg: cfg["init_kwargs"]["namespace"]),
    "runtime_env": ({"env_vars": {"A": "1"}}, lambda cfg: cfg["init_kwargs"]["runtime_env"]),
    "num_cpus": (3, lambda cfg: cfg["embedded"]["num_cpus"]),
    "object_store_memory": (200_000_000, lambda cfg: cfg["embedded"]["object_store_memory"]),
}


@pytest.mark.parametrize("name", sorted(_ray_connection_type()["conn-fields"]))
def test_every_declared_field_reaches_ray(name, monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert name in SAMPLES, f"conn-field {name!r} has no behaviour check here: add one to SAMPLES"
    value, where = SAMPLES[name]
    hook = RayHook(ray_conn_id="ray_x")
    monkeypatch.setattr(
        hook, "get_connection", lambda cid: SimpleNamespace(host=None, port=None, extra_dejson={name: value})
    )
    assert where(hook.resolve()) == value


def test_an_undeclared_extra_never_reaches_ray(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    hook = RayHook(ray_conn_id="ray_x")
    monkeypatch.setattr(
        hook,
        "get_connection",
        lambda cid: SimpleNamespace(host=None, port=None, extra_dejson={"_system_config": {"x": 1}, "namespace": "ok"}),
    )
    cfg = hook.resolve()
    assert cfg["init_kwargs"] == {"namespace": "ok"} and cfg["embedded"] == {}


def _trigger_classes() -> set[str]:
    from airflow.triggers.base import BaseTrigger

    found = set()
    for mod in pkgutil.iter_modules(triggers_pkg.__path__, triggers_pkg.__name__ + "."):
        module = importlib.import_module(mod.name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, BaseTrigger) and cls is not BaseTrigger and cls.__module__ == module.__name__:
                found.add(f"{cls.__module__}.{cls.__qualname__}")
    return found


def test_every_trigger_class_is_registered():
    classes = _trigger_classes()
    assert classes == {
        "airflow_provider_dj.triggers.checkpoint.CheckpointTrigger",
        "airflow_provider_dj.triggers.ray_job.RayJobTrigger",
    }
    registered = {m for t in get_provider_info().get("triggers", []) for m in t["python-modules"]}
    assert registered == {c.rsplit(".", 1)[0] for c in classes}
    required = {  # beyond job_dir: what each trigger cannot run without
        "RayJobTrigger": {
            "dashboard_address": "http://h:8265",
            "submission_id": "dj-x",
            "segment_index": 0,
            "partition_ids": [1],
        },
    }
    for cls_path in classes:  # each registered module imports, and the trigger serializes to its own path
        module, name = cls_path.rsplit(".", 1)
        cls = getattr(importlib.import_module(module), name)
        args = {"job_dir": "/tmp/x", **required.get(name, {})}
        classpath, kwargs = cls(**args).serialize()
        assert classpath == cls_path and kwargs["job_dir"] == "/tmp/x"
        assert cls(**kwargs).serialize() == (classpath, kwargs)  # a restarted triggerer rebuilds it as it was


def test_every_listed_module_imports_and_integrations_are_declared():
    info = get_provider_info()
    names = {i["integration-name"] for i in info["integrations"]}
    for section in ("operators", "sensors", "triggers", "hooks"):
        for entry in info[section]:
            assert entry["integration-name"] in names, section
            for module in entry["python-modules"]:
                importlib.import_module(module)
