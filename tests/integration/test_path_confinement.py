"""``[dj] allowed_roots`` at every entry point that plans a job: ``engine.run_job``, ``dj-airflow validate``
and ``run`` (engine and ``--airflow``), and the DAG's validate task.  A run naming a path outside the
roots is refused before anything is read or written: no job directory, no export, no work dir."""

from __future__ import annotations

import os

import pytest

from airflow_provider_dj.engine.config.path_confinement import PathOutsideRootsError

pytestmark = pytest.mark.integration


@pytest.fixture
def roots(tmp_path, corpus, monkeypatch):
    """The corpus's folder and this test's folder are allowed; ``outside`` is a sibling folder that is not."""
    monkeypatch.setenv("AIRFLOW__DJ__ALLOWED_ROOTS", f"{os.path.dirname(corpus)},{tmp_path}")
    outside = tmp_path.parent / f"{tmp_path.name}_outside"
    outside.mkdir()
    return outside


def _written(*paths) -> list[str]:
    return [str(p) for p in paths if os.path.exists(p)]


def test_run_job_refuses_paths_outside_the_roots_and_writes_nothing(make_recipe, roots, tmp_path):
    from airflow_provider_dj.engine import run_job

    recipe = make_recipe("confined", parts=2)
    export = roots / "stolen.jsonl"
    with pytest.raises(PathOutsideRootsError) as err:
        run_job(recipe, job_id="j1", overrides={"export_path": str(export)}, workers=1)
    assert err.value.key == "export_path" and str(tmp_path) in err.value.message
    with pytest.raises(PathOutsideRootsError) as err:
        run_job(recipe, job_id="j2", overrides={"work_dir": str(roots / "work")}, workers=1)
    assert err.value.key == "work_dir"
    assert _written(export, roots / "work", tmp_path / "work", tmp_path / "confined_out.jsonl") == []

    # Inside the roots the same recipe runs to its export.
    result = run_job(recipe, job_id="j3", workers=1)
    assert result.rows > 0 and os.path.exists(tmp_path / "confined_out.jsonl")


def test_a_symlinked_input_file_pointing_outside_is_refused_before_it_is_read(make_recipe, roots, tmp_path, corpus):
    from airflow_provider_dj.engine import run_job
    from airflow_provider_dj.engine.input.sources import InputOutsideRootsError

    data = tmp_path / "data"
    data.mkdir()
    os.symlink(corpus, data / "a.jsonl")  # inside the corpus's root: allowed
    (roots / "secret.jsonl").write_text('{"text": "not for this run"}\n')
    os.symlink(roots / "secret.jsonl", data / "b.jsonl")
    recipe = make_recipe("linked", parts=2, data=str(data))
    with pytest.raises(InputOutsideRootsError) as err:
        run_job(recipe, job_id="j1", workers=1)
    assert str(roots / "secret.jsonl") in err.value.message
    assert _written(tmp_path / "work", tmp_path / "linked_out.jsonl") == []


def test_the_cli_refuses_before_airflow_or_ray_start(make_recipe, roots, tmp_path, capsys):
    from airflow_provider_dj.cli.main import main

    recipe = make_recipe("confined_cli", parts=2)
    outside = f"export_path={roots / 'stolen.jsonl'}"
    assert main(["validate", recipe, "--set", outside]) == 2
    assert "export_path" in capsys.readouterr().err
    for extra in ([], ["--airflow"]):
        assert main(["run", recipe, "--set", outside, *extra]) == 2
        err = capsys.readouterr().err
        assert "allowed_roots" in err and str(roots / "stolen.jsonl") in err
    assert _written(roots / "stolen.jsonl", tmp_path / "work") == []


def test_the_dags_first_task_refuses_a_conf_path_outside_the_roots_without_retrying(
    make_recipe, run_dag, roots, tmp_path
):
    # gpu_preflight loads the effective recipe first (it would read a sample for a CUDA op), so it is
    # the task that refuses; validate, which would plan and write the job directory, never runs.
    recipe = make_recipe("confined_dag", parts=2)
    dag_run = run_dag(recipe, conf={"export_path": str(roots / "stolen.jsonl")}, retries=2)
    assert dag_run.state == "failed"
    tis = {ti.task_id: ti for ti in dag_run.get_task_instances()}
    assert tis["gpu_preflight"].state == "failed" and tis["gpu_preflight"].try_number == 1  # no retry
    assert tis["validate"].state != "success"
    assert _written(roots / "stolen.jsonl", tmp_path / "work", tmp_path / "confined_dag_out.jsonl") == []


# -- links below the roots: every path the job writes is confined once links are resolved ----------------------


def _tree(path) -> list[str]:
    """Every name under ``path``, to show an outside folder is unchanged."""
    return sorted(os.path.relpath(os.path.join(d, f), path) for d, ds, fs in os.walk(path) for f in ds + fs)


def test_a_job_directory_that_is_a_link_out_of_the_roots_is_refused_before_it_is_read(make_recipe, roots, tmp_path):
    from airflow_provider_dj.engine import run_job

    recipe = make_recipe("jobdir_link", parts=2)
    (tmp_path / "work").mkdir()
    (roots / "planted.txt").write_text("the outside folder's own file\n")
    os.symlink(roots, tmp_path / "work" / "jobx")
    before = _tree(roots)
    with pytest.raises(PathOutsideRootsError) as err:
        run_job(recipe, job_id="jobx", workers=1)
    assert err.value.key == "job_id" and str(roots) in err.value.message
    assert _tree(roots) == before
    assert not os.path.exists(tmp_path / "jobdir_link_out.jsonl")


@pytest.mark.parametrize("subdir", ["checkpoints", "trace", "metadata", "lineage"])
def test_a_folder_of_the_job_that_is_a_link_out_of_the_roots_is_never_written(make_recipe, roots, tmp_path, subdir):
    """A link planted where the job will write (a folder of its job directory): the write is refused, naming
    the path, and nothing lands outside.  Each writer's own check: tests/unit/core/test_write_roots.py."""
    from airflow_provider_dj.core.write_roots import WriteOutsideRootsError
    from airflow_provider_dj.engine import run_job

    extra = "open_tracer: true\n"
    recipe = make_recipe(f"link_{subdir}", parts=2, extra=extra)
    target = roots / subdir
    target.mkdir()
    link = tmp_path / "work" / "jobs" / subdir
    link.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(target, link)
    with pytest.raises(Exception) as err:
        run_job(recipe, job_id="jobs", workers=1)
    text = str(err.value)  # a partition's failure wraps the error; its message is the same
    assert isinstance(err.value, WriteOutsideRootsError) or "which is under none of the roots" in text, text
    assert f"resolves to {target}" in text and "allowed_roots" in text
    assert _tree(target) == [], f"written outside the roots through {link}: {_tree(target)}"
    assert not os.path.exists(tmp_path / f"link_{subdir}_out.jsonl")
