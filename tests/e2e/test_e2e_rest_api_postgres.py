"""The REST API scenarios (tests/e2e/rest_api_scenarios.py) on ``airflow standalone`` with a PostgreSQL
metadata DB: one module per DB, so each DB's server has its own test worker.

Every scenario whose outcome goes through the metadata DB (a triggered run with conf, a schedule, an
Asset event, a cleared task instance) runs here too.  Marking a running partition failed is the
SQLite module's only: what it checks, the task's ``on_kill`` ending its Ray work, does not depend on
the DB, and its slow partition is a minute of CPU on two cores.

This server also confines runs to the e2e folder (``[dj] allowed_roots``), as a shared deployment would,
and its last scenario acts as a person with trigger rights only: templates in ``dag_run.conf`` that read
a Variable, a Connection or a DAG file, and a job directory that is a link out of the roots."""

import os

from tests.e2e import rest_api_scenarios as scenarios
from tests.helpers_compare import assert_same_bytes

pytestmark = scenarios.pytestmark
E2E_DB = "postgres"

# In the scenarios' own order (they share one server; rest_api_scenarios.py says why the order matters).
test_triggered_run_with_conf_overrides_exports_what_a_direct_run_exports = (
    scenarios.test_triggered_run_with_conf_overrides_exports_what_a_direct_run_exports
)
test_recipe_with_a_schedule_runs_on_its_own = scenarios.test_recipe_with_a_schedule_runs_on_its_own
test_scheduled_export_emits_an_asset_event_and_the_consumer_dag_runs_on_it = (
    scenarios.test_scheduled_export_emits_an_asset_event_and_the_consumer_dag_runs_on_it
)
test_failed_partition_cleared_through_the_api_resumes_from_its_checkpoint = (
    scenarios.test_failed_partition_cleared_through_the_api_resumes_from_its_checkpoint
)


# -- a trigger on a shared deployment (issue: trigger-time values are data; links out of the roots) ---------------

SECRET_VAR = "plainvarvalue7341"
SECRET_HOST = "plainconnhost9152"
SECRET_PASSWORD = "connpw5517secret"
DAG_FILE = os.path.join(os.path.dirname(__file__), "..", "..", "dags", "dj_recipes.py")


def e2e_server_env(root: str, work: str, exports: str) -> dict[str, str]:
    """This server confines runs to the e2e folder (the corpus, recipes, work dir and exports all lie
    under it), as a platform team's shared deployment would."""
    return {"AIRFLOW__DJ__ALLOWED_ROOTS": os.path.dirname(root)}


def _dag_file_marker() -> str:
    """A line of the DAG file long enough to be found only where the file's text was copied."""
    with open(DAG_FILE, encoding="utf-8") as fh:
        return max((line.strip() for line in fh), key=len)


def _texts_under(path: str) -> list[tuple[str, str]]:
    """(path, text) of every file under ``path``, and every name as its own entry."""
    found = []
    for d, dirs, files in os.walk(path):
        for name in dirs + files:
            found.append((os.path.join(d, name), name))
        for name in files:
            with open(os.path.join(d, name), "rb") as fh:
                found.append((os.path.join(d, name), fh.read().decode("utf-8", "replace")))
    return found


def _xcom_texts(e2e) -> list[str]:
    import sqlalchemy

    engine = sqlalchemy.create_engine(e2e.server.sql_alchemy_conn)
    try:
        with engine.connect() as conn:
            rows = conn.execute(sqlalchemy.text("SELECT dag_id, run_id, key, CAST(value AS TEXT) FROM xcom")).fetchall()
    finally:
        engine.dispose()
    return [" ".join(str(v) for v in row) for row in rows]


def test_a_trigger_reads_no_secret_and_writes_nothing_through_a_link(e2e, reference):
    """A person with trigger rights, on a server with ``allowed_roots`` set: templates in ``dag_run.conf``
    that read a Variable, a Connection or a DAG-folder file are refused before any work, and none of
    those values appears in any task log, file or file name, XCom, event, summary or effective config;
    a job directory that is a link out of the roots is refused with the outside folder unchanged; and
    the run's dates, the one thing a trigger may template, render."""
    c = e2e.client
    c.request("POST", "/api/v2/variables", json={"key": "region_name", "value": SECRET_VAR})
    c.request(
        "POST",
        "/api/v2/connections",
        json={"connection_id": "plainconn", "conn_type": "generic", "host": SECRET_HOST, "password": SECRET_PASSWORD},
    )
    c.set_paused("e2e_clean", False)
    outside = os.path.join(os.path.dirname(os.path.dirname(e2e.root)), "e2e_outside")
    os.makedirs(outside, exist_ok=True)
    with open(os.path.join(outside, "own.txt"), "w") as fh:
        fh.write("the outside folder's own file\n")
    os.symlink(outside, e2e.job_dir("linked_job"))
    refused = {
        "conn_var": {
            "job_id": "conn_var",
            "export_path": os.path.join(e2e.exports, "{{ conn.plainconn.host }}-{{ var.value.region_name }}.jsonl"),
        },
        "include": {
            "job_id": "include",
            "export_path": os.path.join(e2e.exports, "{% include 'dj_recipes.py' %}.jsonl"),
        },
        "password": {"job_id": "password", "work_dir": "{{ conn.plainconn.password }}"},
        "linked_job": {"job_id": "linked_job"},
    }
    runs = {name: c.trigger("e2e_clean", conf)["dag_run_id"] for name, conf in refused.items()}
    dated = c.trigger(
        "e2e_clean",
        {
            "job_id": "dated",
            "partition": {"num_of_partitions": 3},
            "export_path": os.path.join(e2e.exports, "d_{{ ds_nodash }}.jsonl"),
        },
        logical_date="2026-11-30T00:00:00Z",
    )["dag_run_id"]
    for name, run_id in runs.items():
        final = c.wait_run("e2e_clean", run_id, scenarios.RUN_TIMEOUT)
        assert final["state"] == "failed", f"{name}: {final['state']}"
        tis = {(ti["task_id"], ti["map_index"]): ti for ti in c.task_instances("e2e_clean", run_id)}
        failed = [k for k, ti in tis.items() if ti["state"] == "failed"]
        assert failed and all(k[0] in ("gpu_preflight", "validate") for k in failed), (name, tis)
        assert all(ti["try_number"] <= 1 for ti in tis.values()), f"{name}: a refusal was retried"
        assert not any(k[0].startswith("partitions_") and tis[k]["state"] == "success" for k in tis), name
        key = "job_id" if name == "linked_job" else ("work_dir" if name == "password" else "export_path")
        log = e2e.server.task_log("e2e_clean", run_id, failed[0][0], -1, 1, n=20000)
        assert key in log and ("A value from a trigger is data" in log or "resolves to" in log), log[-3000:]
    final = c.wait_run("e2e_clean", dated, scenarios.RUN_TIMEOUT)
    assert final["state"] == "success", final
    with open(os.path.join(e2e.exports, "d_20261130.jsonl"), "rb") as fh:
        assert_same_bytes(fh.read(), reference.export())

    assert sorted(os.listdir(outside)) == ["own.txt"]  # the link's target: nothing written there
    secrets = (SECRET_VAR, SECRET_HOST, SECRET_PASSWORD, _dag_file_marker())
    places = _texts_under(os.path.join(e2e.server.home, "logs")) + _texts_under(e2e.work) + _texts_under(e2e.exports)
    places += [("xcom", text) for text in _xcom_texts(e2e)]
    leaks = [(where, s) for where, text in places for s in secrets if s in text]
    assert not leaks, leaks[:5]
    assert any(name == "effective_config.json" for _, name in places), "the check read no job directory"
