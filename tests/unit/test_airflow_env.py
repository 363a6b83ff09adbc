"""airflow_env: each `dj-airflow run` gets private Airflow state; nothing of one run touches another's.

Real files, real processes and a real ``airflow db migrate`` (the template
DB); nothing is mocked.  The private-DB path runs in a fresh interpreter,
because it must happen before Airflow is imported (this test process may
have imported it already).
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import subprocess
import sys
import textwrap
import time

import pytest

from airflow_provider_dj.cli import airflow_env


def _clean_env(home, **extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW__") and k != "AIRFLOW_HOME"}
    env.update(DJ_AIRFLOW_HOME=str(home), **extra)
    return env


def test_db_url_comes_from_the_environment_then_the_config_file_then_the_default(tmp_path, monkeypatch):
    monkeypatch.delenv("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", raising=False)
    monkeypatch.delenv("AIRFLOW_CONFIG", raising=False)
    assert airflow_env.configured_db_url(str(tmp_path)) == f"sqlite:///{tmp_path}/airflow.db"
    (tmp_path / "airflow.cfg").write_text("[database]\nsql_alchemy_conn = postgresql://u@h/db\n")
    assert airflow_env.configured_db_url(str(tmp_path)) == "postgresql://u@h/db"
    monkeypatch.setenv("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "mysql://u@h/db")
    assert airflow_env.configured_db_url(str(tmp_path)) == "mysql://u@h/db"


def test_a_private_stub_folder_holds_only_its_stub_and_deletes_nothing(tmp_path):
    other = tmp_path / "other_run" / "dags"
    other.mkdir(parents=True)
    (other / "dj_cli_other.py").write_text("# another run's stub\n")
    mine = tmp_path / "my_run" / "dags"
    folder = airflow_env.write_cli_dag_stub(str(tmp_path), "/r/recipe.yaml", "my-dag.v1", folder=str(mine))
    assert folder == str(mine)
    assert sorted(os.listdir(mine)) == ["dj_cli_my_dag_v1.py"]
    assert "build_dag('/r/recipe.yaml', dag_id='my-dag.v1')" in (mine / "dj_cli_my_dag_v1.py").read_text()
    assert (other / "dj_cli_other.py").read_text() == "# another run's stub\n"


def _run_dir(home, name: str, owner: dict | None, age_s: float = 0.0) -> str:
    path = home / airflow_env.RUNS_DIR / name
    path.mkdir(parents=True)
    (path / "airflow.db").write_bytes(b"x")
    if owner is not None:
        (path / airflow_env.RUN_OWNER_FILE).write_text(json.dumps(owner))
    if age_s:
        old = time.time() - age_s
        os.utime(path, (old, old))
    return str(path)


def test_sweep_removes_only_runs_whose_owner_is_gone(tmp_path):
    from airflow_provider_dj.engine.jobdir.lock import pid_start_time

    host = socket.gethostname()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    me = os.getpid()
    live = _run_dir(tmp_path, "run-live", {"host": host, "pid": me, "pid_start": pid_start_time(me)})
    crashed = _run_dir(tmp_path, "run-crashed", {"host": host, "pid": dead.pid, "pid_start": 1})
    reused = _run_dir(tmp_path, "run-reused", {"host": host, "pid": me, "pid_start": (pid_start_time(me) or 0) + 1})
    elsewhere = _run_dir(tmp_path, "run-elsewhere", {"host": host + "-other", "pid": dead.pid})
    young_orphan = _run_dir(tmp_path, "run-young", None)
    old_orphan = _run_dir(tmp_path, "run-old", None, age_s=airflow_env.ORPHAN_AGE_S + 60)
    not_ours = _run_dir(tmp_path, "something-else", None, age_s=airflow_env.ORPHAN_AGE_S + 60)
    half_written = _run_dir(tmp_path, "run-half", None)  # its owner file is being written this instant
    with open(os.path.join(half_written, airflow_env.RUN_OWNER_FILE), "w") as fh:
        fh.write('{"host": ')

    removed = airflow_env.sweep_stale_runs(str(tmp_path))

    assert sorted(removed) == sorted([crashed, reused, old_orphan])
    for kept in (live, elsewhere, young_orphan, not_ours, half_written):
        assert os.path.exists(os.path.join(kept, "airflow.db")), kept
    for gone in removed:
        assert not os.path.exists(gone)


PREPARE = textwrap.dedent("""\
    import json, os, sys, time
    from airflow_provider_dj.cli import airflow_env
    go_at = float(sys.argv[2])
    while time.time() < go_at:
        time.sleep(0.01)
    env = airflow_env.prepare_run(sys.argv[1], "dag_" + str(os.getpid()))
    print(json.dumps({"run_dir": env.run_dir, "db": env.db_path, "dags": env.dags_folder,
                      "conn": os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"],
                      "folder_env": os.environ["AIRFLOW__CORE__DAGS_FOLDER"],
                      "airflow_imported": "airflow" in sys.modules}))
    sys.stdout.flush()
    if sys.argv[3] == "cleanup":
        env.cleanup()
        assert "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN" not in os.environ
""")


def test_runs_started_together_migrate_one_template_and_each_get_a_private_copy(tmp_path):
    """Three first runs in a fresh home at the same instant: one migration, three private DBs."""
    home = tmp_path / "home"
    go_at = time.time() + 3.0
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", PREPARE, f"/recipes/r{i}.yaml", str(go_at), "cleanup" if i == 0 else "keep"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=_clean_env(home),
        )
        for i in range(3)
    ]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err.decode()[-3000:]
        results.append(json.loads(out.decode().strip().splitlines()[-1]))

    template = airflow_env.template_db_path(str(home))
    assert os.path.isfile(template)
    names = sorted(os.listdir(home))
    # No half-built template or temp file is left, and the shared airflow.db is never created.
    assert not [n for n in names if n.endswith(".tmp") or n.startswith(".dj_cli_template_db.")], names
    assert "airflow.db" not in names
    cfg = (home / "airflow.cfg").read_text()
    assert "dj_cli_runs" not in cfg and "sqlite:///" + str(home / "airflow.db") in cfg  # no per-run override leaked in
    con = sqlite3.connect(template)
    try:
        assert con.execute("select count(*) from alembic_version").fetchone()[0] == 1
        assert con.execute("pragma journal_mode").fetchone()[0] == "delete"  # one self-contained file
    finally:
        con.close()

    dbs = [r["db"] for r in results]
    assert len(set(dbs)) == 3 and len({r["run_dir"] for r in results}) == 3
    for r in results:
        assert not r["airflow_imported"]  # all of this before Airflow reads its configuration
        assert r["conn"] == f"sqlite:///{r['db']}" and r["folder_env"] == r["dags"]
        assert os.path.dirname(r["db"]) == r["run_dir"] and r["dags"].startswith(r["run_dir"])
    assert not os.path.exists(results[0]["run_dir"])  # run 0 cleaned up after itself ...
    for r in results[1:]:  # ... and nothing of the others (their owners exited without cleanup)
        with open(r["db"], "rb") as a, open(template, "rb") as b:
            assert a.read() == b.read()
        assert os.listdir(r["dags"]) == [f"dj_cli_dag_{os.path.basename(r['run_dir']).split('-')[1]}.py"]

    # A later run sweeps the two dead runs' leftovers and keeps working.
    later = subprocess.run(
        [sys.executable, "-c", PREPARE, "/recipes/later.yaml", "0", "cleanup"],
        capture_output=True,
        env=_clean_env(home),
        timeout=300,
    )
    assert later.returncode == 0, later.stderr.decode()[-3000:]
    assert os.listdir(home / airflow_env.RUNS_DIR) == []


SHARED = textwrap.dedent("""\
    import json, os, sys
    from airflow_provider_dj.cli import airflow_env
    env = airflow_env.prepare_run("/r/x.yaml", "x")
    seen = {"db": env.db_path, "conn": os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"],
            "folder_env": os.environ["AIRFLOW__CORE__DAGS_FOLDER"], "dags": env.dags_folder,
            "stubs": os.listdir(env.dags_folder), "run_dir": env.run_dir}
    env.cleanup()
    seen["conn_after"] = os.environ.get("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN")
    print(json.dumps(seen))
""")


def test_a_server_db_the_home_configures_is_never_opened(tmp_path):
    """An AIRFLOW_HOME whose configuration names a server DB (an existing deployment's): the run reads
    that configuration but migrates and writes only its own SQLite copy, and leaves the setting as it was."""
    home = tmp_path / "home"
    home.mkdir()
    url = "postgresql://dj@127.0.0.1:1/production"  # nothing listens there: opening it would fail the run
    proc = subprocess.run(
        [sys.executable, "-c", SHARED],
        capture_output=True,
        text=True,
        timeout=300,
        env=_clean_env(home, AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=url),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["db"].startswith(seen["run_dir"]) and seen["conn"] == f"sqlite:///{seen['db']}"
    assert seen["conn_after"] == url  # restored for whatever the process does next
    assert seen["folder_env"] == seen["dags"] and seen["dags"].startswith(seen["run_dir"])
    assert seen["stubs"] == ["dj_cli_x.py"]
    assert not os.path.exists(seen["run_dir"])
    assert not any(n.startswith(".dj_db_migrated") for n in os.listdir(home))  # the server DB was never migrated


RESERVED = textwrap.dedent("""\
    import json, os, sys
    from airflow_provider_dj.cli import airflow_env
    reserved = airflow_env.reserve_run()
    import airflow.settings  # what a templated recipe's preview does: Airflow reads its settings now
    early = {"conn": airflow.settings.SQL_ALCHEMY_CONN, "dags": airflow.settings.DAGS_FOLDER,
             "db_exists_before": os.path.exists(reserved.db_path)}
    env = airflow_env.prepare_run("/r/x.yaml", "x", reserved=reserved)
    from sqlalchemy import text
    with airflow.settings.engine.connect() as c:  # the copy is a migrated DB, and the one Airflow uses
        version = c.execute(text("select version_num from alembic_version")).scalar()
    print(json.dumps({**early, "db": env.db_path, "run_dir": env.run_dir, "version": version,
                      "stubs": os.listdir(env.dags_folder)}))
    env.cleanup()
""")


def test_a_run_reserved_before_airflow_is_imported_gets_its_own_db_after_the_import(tmp_path):
    """A templated recipe's preview imports Airflow before the DAG is known: the reservation made before
    it points Airflow at this run's DB copy, which prepare_run then writes; nothing is shared."""
    home = tmp_path / "home"
    home.mkdir()
    proc = subprocess.run(
        [sys.executable, "-c", RESERVED], capture_output=True, text=True, timeout=300, env=_clean_env(home)
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["conn"] == f"sqlite:///{seen['db']}" and seen["db"].startswith(seen["run_dir"])
    assert seen["dags"].startswith(seen["run_dir"]) and seen["stubs"] == ["dj_cli_x.py"]
    assert seen["db_exists_before"] is False and seen["version"]
    assert not os.path.exists(seen["run_dir"])
    assert not os.path.exists(home / "airflow.db")  # the home's own DB was never created


def test_an_in_process_caller_uses_the_dag_folder_airflow_already_reads(tmp_path):
    """Airflow fixed its DAG folder and DB when it was imported here: the run must use both."""
    from airflow import settings

    env = airflow_env.prepare_run(str(tmp_path / "r.yaml"), "in_proc", private=False)
    assert env.run_dir is None and env.db_path is None
    assert env.dags_folder == settings.DAGS_FOLDER
    assert "dj_cli_in_proc.py" in os.listdir(settings.DAGS_FOLDER)
    env.cleanup()
    assert "dj_cli_in_proc.py" in os.listdir(settings.DAGS_FOLDER)  # the caller's DAG folder is not ours to empty


def test_a_failed_migration_names_the_home_and_what_to_do(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    # A home whose configuration breaks every Airflow command: writing the default configuration fails
    # (no airflow.cfg yet), and with one in place the template's migration does.
    env = _clean_env(home, AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS="no_such_module.CONNECT_ARGS")
    code = "from airflow_provider_dj.cli import airflow_env\nairflow_env.prepare_run('/r/x.yaml', 'x')\n"
    for step in ("default configuration", "airflow db migrate"):
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
        assert proc.returncode != 0
        assert "AirflowEnvError" in proc.stderr and step in proc.stderr
        assert f"AIRFLOW_HOME={home}" in proc.stderr and "DJ_AIRFLOW_HOME" in proc.stderr
        assert os.listdir(home / airflow_env.RUNS_DIR) == []  # the failed run left no directory behind
        (home / "airflow.cfg").write_text("[core]\nload_examples = False\n")


def test_an_unwritable_home_is_refused_naming_it_and_what_to_do(tmp_path, monkeypatch):
    home = tmp_path / "not_a_dir"
    home.write_text("a file where the home should be")
    monkeypatch.setenv("AIRFLOW_HOME", str(home))
    with pytest.raises(
        airflow_env.AirflowEnvError, match=r"cannot prepare the Airflow home .*not_a_dir.*DJ_AIRFLOW_HOME"
    ):
        airflow_env.prepare_run("/r/x.yaml", "x")
    assert home.read_text() == "a file where the home should be"


def test_rewriting_a_stub_keeps_one_file_with_the_latest_recipe(tmp_path):
    n = 6
    folder = tmp_path / "dags"
    for i in range(n):
        airflow_env.write_cli_dag_stub(str(tmp_path), f"/r/{i}.yaml", "d", folder=str(folder))
    assert os.listdir(folder) == ["dj_cli_d.py"]
    assert f"/r/{n - 1}.yaml" in (folder / "dj_cli_d.py").read_text()
