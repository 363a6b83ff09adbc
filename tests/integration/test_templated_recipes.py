"""Templated nightly recipes (docs/nightly.md): rendered by the validate task with the run's context."""

from __future__ import annotations

import json
import os

import pytest

from airflow_provider_dj.cli.main import main
from tests.helpers_compare import assert_same_bytes

pytestmark = pytest.mark.integration

RECIPE = """\
project_name: {name}
dataset_path: {root}/crawl/{{{{ ds }}}}/*.jsonl
export_path: {root}/clean/{export}
work_dir: {root}/work
schedule: "@daily"
partition:
  mode: manual
  num_of_partitions: 2
process:
  - whitespace_normalization_mapper:
  - words_num_filter:
      min_num: "{{{{ 1 + 2 }}}}"
"""


def _write_day(root, day: str, texts: list[str]) -> None:
    folder = root / "crawl" / day
    folder.mkdir(parents=True)
    for part in (0, 1):  # two files, so the glob is exercised
        rows = texts[part::2]
        (folder / f"part{part}.jsonl").write_text(
            "".join(json.dumps({"text": t, "day": "d" + day}) + "\n" for t in rows)
        )


@pytest.fixture
def nightly(tmp_path):
    _write_day(tmp_path, "2026-11-30", ["one two three", "too short", "  a b c d ", "x", "four words are here"])
    _write_day(tmp_path, "2026-12-01", ["another day entirely here", "its rows must not be read"])

    def make(name: str, export: str = "{{ ds_nodash }}.jsonl") -> str:
        path = tmp_path / f"{name}.yaml"
        path.write_text(RECIPE.format(name=name, root=tmp_path, export=export))
        return str(path)

    return make


@pytest.mark.parametrize("path", ["engine", "airflow"])
def test_cli_run_with_a_logical_date_renders_the_paths_and_records_them(
    path, nightly, tmp_path, airflow_home, ray_cluster, capsys
):
    """Both paths of `dj-airflow run` render the same values and record them alike; under Airflow the
    export's Asset event names the rendered file too."""
    recipe = nightly("tmpl_nightly")
    flags = ["--airflow"] if path == "airflow" else []
    assert main(["run", recipe, "--logical-date", "2026-11-30", "--job-id", "tmpl_job", *flags]) == 0
    out = capsys.readouterr().out
    assert "dataset_path: '" in out and f"-> '{tmp_path}/crawl/2026-11-30/*.jsonl'" in out

    export = tmp_path / "clean" / "20261130.jsonl"
    rows = [json.loads(line) for line in export.read_text().splitlines()]
    # Input order (part0 then part1), whitespace normalized, fewer than 3 words filtered: 11-30 rows only.
    assert rows == [
        {"text": "one two three", "day": "d2026-11-30"},
        {"text": "a b c d", "day": "d2026-11-30"},
        {"text": "four words are here", "day": "d2026-11-30"},
    ]
    assert sorted(os.listdir(tmp_path / "clean")) == ["20261130.jsonl"]

    cfg = json.loads((tmp_path / "work" / "tmpl_job" / "metadata" / "effective_config.json").read_text())
    assert cfg["dataset_path"] == f"{tmp_path}/crawl/2026-11-30/*.jsonl"
    assert cfg["export_path"] == str(export)
    assert cfg["process"][1] == {"words_num_filter": {"min_num": 3}}
    assert cfg["templates"]["logical_date"] == "2026-11-30T00:00:00+00:00"
    assert cfg["templates"]["values"] == {
        "dataset_path": {
            "template": f"{tmp_path}/crawl/{{{{ ds }}}}/*.jsonl",
            "rendered": f"{tmp_path}/crawl/2026-11-30/*.jsonl",
        },
        "export_path": {"template": f"{tmp_path}/clean/{{{{ ds_nodash }}}}.jsonl", "rendered": str(export)},
        "process[1].words_num_filter.min_num": {"template": "{{ 1 + 2 }}", "rendered": "3"},
    }

    if path == "engine":
        return  # no Airflow: no Asset event
    # The Asset is the template's pattern (fixed at parse time); the event names the rendered file.
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        ((uri, extra),) = session.execute(
            select(AssetModel.uri, AssetEvent.extra)
            .join(AssetModel, AssetEvent.asset_id == AssetModel.id)
            .where(AssetEvent.source_dag_id == "tmpl_nightly")
        ).all()
    assert uri == f"file://{tmp_path}/clean/*.jsonl"
    assert extra["export_path"] == str(export) and extra["rows"] == 3
    assert extra["export_path_template"] == f"{tmp_path}/clean/{{{{ ds_nodash }}}}.jsonl"
    assert extra["export_path_overridden"] is False
    assert extra["logical_date"] == extra["rendered_for_logical_date"] == "2026-11-30T00:00:00+00:00"

    # A resume from a run of another logical date would read and write another day: refused at once.
    assert main(["run", recipe, "--resume", "tmpl_job", "--logical-date", "2026-12-01"]) == 2
    err = capsys.readouterr().err
    assert "template_rendered_differently" in err and "2026-11-30" in err and "20261201.jsonl" in err
    assert sorted(os.listdir(tmp_path / "clean")) == ["20261130.jsonl"]
    # Without --logical-date a resume renders with the date the job recorded: it finds the job done.
    before = export.read_bytes()
    assert main(["run", recipe, "--resume", "tmpl_job"]) == 0
    assert "preview for logical date 2026-11-30T00:00:00+00:00" in capsys.readouterr().out
    assert_same_bytes(export.read_bytes(), before)
    assert sorted(os.listdir(tmp_path / "clean")) == ["20261130.jsonl"]


def test_a_template_that_does_not_render_fails_the_validate_task_before_any_work(
    nightly, tmp_path, airflow_home, capfd
):
    import pendulum

    from airflow_provider_dj.cli.airflow_env import write_cli_dag_stub
    from airflow_provider_dj.dag_builder.factory import build_dag

    recipe = nightly("tmpl_bad", export="{{ dss }}.jsonl")  # a typo: parses, but no run defines `dss`
    write_cli_dag_stub(airflow_home, recipe, "tmpl_bad")
    dag = build_dag(recipe, dag_id="tmpl_bad", retries=0)
    assert dag.task_dict["export"].outlets[0].uri == f"file://{tmp_path}/clean/*.jsonl"
    dr = dag.test(logical_date=pendulum.datetime(2026, 11, 30, tz="UTC"))
    states = {ti.task_id: str(ti.state) for ti in dr.get_task_instances()}
    assert str(dr.state).endswith("failed") and states["validate"].endswith("failed")
    assert states["gpu_preflight"].endswith("success")
    log = capfd.readouterr().out  # the task log (dag.test writes it to stdout)
    refused = log[log.index("Recipe refused before any work") :]
    assert f"tmpl_bad.yaml: export_path: template '{tmp_path}/clean/{{{{ dss }}}}.jsonl' does not render" in refused
    assert "'dss' is undefined" in refused and "RecipeRefused" in refused
    assert not (tmp_path / "clean").exists() and not (tmp_path / "work").exists()


@pytest.mark.parametrize("path", ["engine", "airflow"])
def test_a_templated_recipe_runs_from_the_console_script_in_a_fresh_home(path, nightly, tmp_path):
    """A first-time user's shell: a new HOME, no Airflow or Ray variables.  The preview imports Airflow
    before the run starts; it must use the CLI's own Airflow home, never create Airflow's ~/airflow,
    and (``--airflow``) the DAG run must find a migrated metadata DB."""
    import subprocess
    import sys

    home = tmp_path / "home"
    home.mkdir()
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "LANG": "C.UTF-8"}
    recipe = nightly("fresh_nightly")
    flags = ["--executor", "local"] + (["--airflow"] if path == "airflow" else [])

    def night(day: str, job_id: str) -> list[str]:
        dj = os.path.join(os.path.dirname(sys.executable), "dj-airflow")
        return [dj, "run", recipe, "--logical-date", day, "--job-id", job_id, *flags]

    proc = subprocess.run(night("2026-11-30", f"fresh_{path}"), env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
    rows = [json.loads(line)["text"] for line in (tmp_path / "clean" / "20261130.jsonl").read_text().splitlines()]
    assert rows == ["one two three", "a b c d", "four words are here"]
    assert not (home / "airflow").exists(), "the CLI wrote into Airflow's default home"
    ours = home / ".dj-airflow" / "airflow"
    assert ours.is_dir()
    assert not (ours / "airflow.db").exists(), "the run used the home's shared DB, not a private copy"
    assert not os.listdir(ours / "dj_cli_runs"), "the run left its private directory behind"
    if path == "airflow":
        assert f"Airflow home: {ours}; metadata DB: a private copy for this run" in proc.stdout
    # A later run on the same machine (the next night): the set-up the first run made is reused.
    again = subprocess.run(night("2026-12-01", f"fresh_{path}_2"), env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, (again.stdout[-3000:], again.stderr[-3000:])
    rows = [json.loads(line)["text"] for line in (tmp_path / "clean" / "20261201.jsonl").read_text().splitlines()]
    assert rows == ["another day entirely here", "its rows must not be read"]
    assert not (ours / "airflow.db").exists() and not os.listdir(ours / "dj_cli_runs")


@pytest.mark.parametrize("path", ["engine", "airflow"])
def test_templated_runs_at_once_in_an_existing_airflow_home_never_touch_its_db(path, nightly, tmp_path):
    """AIRFLOW_HOME names a deployment's home whose airflow.cfg points at its PostgreSQL (nothing listens
    there: opening it would fail the run).  Two nights at once read that configuration, each runs on a
    DB of its own, and the deployment's DB is neither migrated nor written."""
    import subprocess
    import sys

    prod = tmp_path / "prod_airflow"
    prod.mkdir()
    cfg = "[core]\nload_examples = False\n[database]\nsql_alchemy_conn = postgresql://airflow@127.0.0.1:1/prod\n"
    (prod / "airflow.cfg").write_text(cfg)
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path / "home"), "LANG": "C.UTF-8", "AIRFLOW_HOME": str(prod)}
    recipe = nightly("prod_nightly")
    dj = os.path.join(os.path.dirname(sys.executable), "dj-airflow")
    flags = ["--executor", "local"] + (["--airflow"] if path == "airflow" else [])
    procs = {
        day: subprocess.Popen(
            [dj, "run", recipe, "--logical-date", day, "--job-id", f"prod_{path}_{day}", *flags],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for day in ("2026-11-30", "2026-12-01")
    }
    outs = {day: p.communicate(timeout=600) for day, p in procs.items()}
    for day, p in procs.items():
        assert p.returncode == 0, (day, outs[day][0][-3000:], outs[day][1][-3000:])
        if path == "airflow":
            assert f"Airflow home: {prod}; metadata DB: a private copy for this run" in outs[day][0]

    def texts(name):
        return [json.loads(line)["text"] for line in (tmp_path / "clean" / name).read_text().splitlines()]

    assert texts("20261130.jsonl") == ["one two three", "a b c d", "four words are here"]
    assert texts("20261201.jsonl") == ["another day entirely here", "its rows must not be read"]
    assert (prod / "airflow.cfg").read_text() == cfg
    assert not (prod / "airflow.db").exists()
    assert not [n for n in os.listdir(prod) if n.startswith(".dj_db_migrated")], "the deployment's DB was migrated"
    assert os.listdir(prod / "dj_cli_runs") == []  # each run removed its private directory
