"""The decisions around `dj-airflow run`'s early Ray start (no cluster: ray.init is replaced)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from airflow_provider_dj import cli
from airflow_provider_dj.hooks import ray_in_process
from airflow_provider_dj.hooks.ray import RayHook
from airflow_provider_dj.operators.resume_validator import ResumeValidatorOperator


def _recipe(tmp_path, data: str, resume=None):
    return SimpleNamespace(dataset_path=data, resume=resume, work_dir=str(tmp_path))


@pytest.fixture
def no_ray_env(monkeypatch):
    for key in ("RAY_ADDRESS", "AIRFLOW_CONN_RAY_DEFAULT", "DJ_RAY_EARLY_START"):
        monkeypatch.delenv(key, raising=False)


def test_wants_ray_only_when_the_run_will_need_the_in_process_cluster(tmp_path, monkeypatch, no_ray_env):
    data = tmp_path / "in.jsonl"
    data.write_text('{"text": "x"}\n')
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert cli._wants_ray(_recipe(tmp_path, str(data)))
    assert not cli._wants_ray(_recipe(tmp_path, str(empty)))  # an empty input never starts Ray
    assert cli._wants_ray(_recipe(tmp_path, str(tmp_path / "*.jsonl")))  # a glob: assume rows
    (tmp_path / "done").mkdir()
    (tmp_path / "done" / "job_summary.json").write_text('{"status": "completed"}')
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "job_summary.json").write_text('{"status": "failed"}')
    assert not cli._wants_ray(_recipe(tmp_path, str(data), resume="done"))
    assert cli._wants_ray(_recipe(tmp_path, str(data), resume="half"))
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.5:6379")  # a configured cluster: no private one
    assert not cli._wants_ray(_recipe(tmp_path, str(data)))
    monkeypatch.delenv("RAY_ADDRESS")
    monkeypatch.setenv("DJ_RAY_EARLY_START", "0")
    assert not cli._wants_ray(_recipe(tmp_path, str(data)))


def test_placeholder_group_only_under_the_in_process_runner(monkeypatch):
    monkeypatch.delenv("DJ_RAY_IN_PROCESS", raising=False)
    assert ResumeValidatorOperator._mapped_groups([]) == []  # scheduler: mapped tasks show as skipped
    groups = [{"group_id": 0, "partition_ids": [0], "label": "p0 rows 0-9"}]
    assert ResumeValidatorOperator._mapped_groups(groups) is groups
    monkeypatch.setenv("DJ_RAY_IN_PROCESS", "2")
    (placeholder,) = ResumeValidatorOperator._mapped_groups([])
    assert placeholder["partition_ids"] == [] and placeholder["label"] == "no partitions to run"
    assert ResumeValidatorOperator._mapped_groups(groups) is groups


def test_a_configured_cluster_replaces_the_background_started_one(monkeypatch):
    """The CLI starts its cluster before it can read the ray connection; an address found later wins."""
    import ray

    calls: list = []
    state = {"up": True}
    monkeypatch.setattr(ray, "is_initialized", lambda: state["up"])
    monkeypatch.setattr(ray, "shutdown", lambda: (calls.append("shutdown"), state.update(up=False)))
    monkeypatch.setattr(ray, "init", lambda **kw: (calls.append(("init", kw["address"])), state.update(up=True)))
    monkeypatch.setattr(
        ray_in_process, "_state", {"thread": object(), "error": None, "seconds": 0.1, "abandoned": False}
    )
    monkeypatch.setattr(ray_in_process, "_ready", SimpleNamespace(wait=lambda: True))
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.5:6379")
    hook = RayHook(ray_conn_id=None)
    hook.get_client()
    hook.get_client()  # connected: no second shutdown or init
    assert calls == ["shutdown", ("init", "10.0.0.5:6379")]
    assert not ray_in_process.started_in_background()
