"""The decisions around `dj-airflow run`'s early Ray start (no cluster: ray.init is replaced)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import airflow_provider_dj.cli.run_report as cli
from airflow_provider_dj.hooks import ray_in_process
from airflow_provider_dj.hooks.ray import RayHook
from airflow_provider_dj.operators.local_run import LocalRun
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
    assert cli.wants_ray(_recipe(tmp_path, str(data)))
    assert not cli.wants_ray(_recipe(tmp_path, str(empty)))  # an empty input never starts Ray
    assert cli.wants_ray(_recipe(tmp_path, str(tmp_path / "*.jsonl")))  # a glob: assume rows
    (tmp_path / "done").mkdir()
    (tmp_path / "done" / "job_summary.json").write_text('{"status": "completed"}')
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "job_summary.json").write_text('{"status": "failed"}')
    assert not cli.wants_ray(_recipe(tmp_path, str(data), resume="done"))
    assert cli.wants_ray(_recipe(tmp_path, str(data), resume="half"))
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.5:6379")  # a configured cluster: no private one
    assert not cli.wants_ray(_recipe(tmp_path, str(data)))
    monkeypatch.delenv("RAY_ADDRESS")
    monkeypatch.setenv("DJ_RAY_EARLY_START", "0")
    assert not cli.wants_ray(_recipe(tmp_path, str(data)))


def test_placeholder_group_only_under_the_in_process_runner():
    assert ResumeValidatorOperator._mapped_groups([], None) == []  # scheduler: mapped tasks show as skipped
    from airflow_provider_dj.engine.planning.execution_group import ExecutionGroup

    plain = {"group_id": 0, "partition_ids": [0], "start_row": 0, "end_row": 10, "label": "p0 rows 0-9"}
    groups = [ExecutionGroup.from_dict(plain)]
    assert ResumeValidatorOperator._mapped_groups(groups, None) == [plain]  # XCom's plain dicts
    local = LocalRun(ray_cpus=2, max_concurrent_partitions=2).to_dict()  # what dj-airflow run passes
    (placeholder,) = ResumeValidatorOperator._mapped_groups([], local)
    assert placeholder["partition_ids"] == [] and placeholder["label"] == "no partitions to run"
    assert ResumeValidatorOperator._mapped_groups(groups, local) == [plain]


def test_the_cli_hands_its_in_process_run_to_the_operators_as_arguments(tmp_path):
    """build_dag(local_run=...) reaches every operator that dispatches to Ray or plans the job; without it
    (a scheduler's DAG processor) none has one, and the parse-time concurrency is the built-in default."""
    from airflow_provider_dj.dag_builder.factory import build_dag

    data = tmp_path / "in.jsonl"
    data.write_text('{"text": "a b c"}\n' * 8)
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        f"project_name: local_run_args\ndataset_path: {data}\nexport_path: {tmp_path / 'out.jsonl'}\n"
        f"work_dir: {tmp_path / 'work'}\npartition: {{mode: manual, num_of_partitions: 8}}\n"
        "process:\n  - whitespace_normalization_mapper:\n"
    )
    local = LocalRun(ray_cpus=3, max_concurrent_partitions=6).to_dict()
    dag = build_dag(str(recipe), local_run=local)
    got = {
        t.task_id: getattr(t, "partial_kwargs", {}).get("local_run", getattr(t, "local_run", None)) for t in dag.tasks
    }
    assert got == {"gpu_preflight": local, "validate": local, "partitions_seg0": local, "export": local}
    assert dag.get_task("partitions_seg0").partial_kwargs["max_active_tis_per_dagrun"] == 6
    plain = build_dag(str(recipe))
    assert all(getattr(t, "local_run", None) is None for t in plain.tasks if t.task_id != "partitions_seg0")
    assert "local_run" not in plain.get_task("partitions_seg0").partial_kwargs
    assert plain.get_task("partitions_seg0").partial_kwargs["max_active_tis_per_dagrun"] == 4
    assert LocalRun.of(local) == LocalRun(ray_cpus=3, max_concurrent_partitions=6)


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


def _flaky_ray_init(monkeypatch, failures: int, message: str) -> list:
    """ray.init raising ``message`` ``failures`` times, then starting (no cluster: Ray's own start-up
    timeout cannot be made to run out on cue)."""
    import ray

    calls: list = []

    def init(**kw):
        calls.append("init")
        if calls.count("init") <= failures:
            raise Exception(message)  # what Ray's node.py raises

    monkeypatch.setattr(ray, "init", init)
    monkeypatch.setattr(ray, "shutdown", lambda: calls.append("shutdown"))
    monkeypatch.setattr(ray_in_process, "ensure_auth_token", lambda: None)
    return calls


TIMED_OUT = "The current node timed out during startup. This could happen because some of the raylet failed"


def test_a_start_up_that_times_out_is_started_again():
    with pytest.MonkeyPatch.context() as mp:
        calls = _flaky_ray_init(mp, failures=2, message=TIMED_OUT)
        ray_in_process._init(1, {})
    assert calls == ["init", "shutdown", "init", "shutdown", "init"]


def test_start_up_gives_up_after_its_attempts_and_other_errors_are_not_retried():
    with pytest.MonkeyPatch.context() as mp:
        calls = _flaky_ray_init(mp, failures=99, message=TIMED_OUT)
        with pytest.raises(Exception, match="timed out during startup"):
            ray_in_process._init(1, {})
    assert calls.count("init") == ray_in_process.START_ATTEMPTS
    with pytest.MonkeyPatch.context() as mp:
        calls = _flaky_ray_init(mp, failures=1, message="address already in use")
        with pytest.raises(Exception, match="address already in use"):
            ray_in_process._init(1, {})
    assert calls == ["init"]


def test_what_a_timed_out_start_left_running_is_ended_before_the_next_start():
    """A timed-out start's processes are killed before the next start; the started one's, older
    children, and a non-Ray child started meanwhile (the CLI's main thread runs ``airflow db migrate``
    while Ray starts in a thread) are kept.  Ray's GCS and raylet are not started: stand-ins name a
    file in Ray's package directory on their command line, as Ray's own processes do."""
    import os
    import subprocess
    import sys

    import ray

    sleep = [sys.executable, "-c", "import time; time.sleep(60)"]
    ray_like = [*sleep, os.path.join(os.path.dirname(ray.__file__), "_private", "stand_in.py")]
    older = subprocess.Popen(sleep)
    spawned: list[subprocess.Popen] = []
    meanwhile: list[subprocess.Popen] = []

    def init(**kw):
        spawned.append(subprocess.Popen(ray_like))
        if len(spawned) == 1:
            meanwhile.append(subprocess.Popen(sleep))  # another thread's child, not Ray's
            raise Exception(TIMED_OUT)

    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(ray, "init", init)
            mp.setattr(ray, "shutdown", lambda: None)
            mp.setattr(ray_in_process, "ensure_auth_token", lambda: None)
            ray_in_process._init(1, {})
        # The timed-out start's child is gone at once (it would sleep 60 s; _init reaped it, so Popen
        # reads no signal from it).
        assert spawned[0].poll() is not None
        assert spawned[1].poll() is None and older.poll() is None
        assert meanwhile[0].poll() is None
    finally:
        for p in (older, *spawned, *meanwhile):
            p.kill()
            p.wait()
