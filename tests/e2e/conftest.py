"""Fixtures for the end-to-end tests: a real ``airflow standalone`` per metadata DB.

One server per DB (SQLite, PostgreSQL) serves every scenario of the module:
its start-up (12-36 s, more on a busy machine) is the expensive part, so it
is paid once per DB.  The reference export (what a direct ``dj-airflow run``
of the same recipe writes) is computed once per session, in the background
while the first server starts.

PostgreSQL comes from ``scripts/postgres_for_tests.sh`` (``scripts/test.sh``
exports its URL as DJ_E2E_POSTGRES_URL; without it the fixture runs the
script).  When no PostgreSQL can be had the PostgreSQL variant skips on a
developer machine and fails under CI (``CI`` set), where it must run.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from dataclasses import dataclass

import pytest

from tests.e2e.airflow_server import REPO_ROOT, VENV_BIN, AirflowServer
from tests.e2e.rest_client import AirflowRestClient

# The scenarios live in a plain module that the per-DB test modules import: rewrite its asserts as
# pytest does a test module's, so a failure shows the values.
pytest.register_assert_rewrite("tests.e2e.rest_api_scenarios")

DJ_AIRFLOW = os.path.join(VENV_BIN, "dj-airflow")

CLEAN_ROWS = 600
SLOW_ROWS = 20000
SLOW_OPS = 60

# The ops of the clean and scheduled recipes.  No global op (deduplicator):
# its barrier, global step and second segment would add three task steps
# per run, about a minute on a loaded two-core machine; the dag.test()
# integration tests cover that shape (tests/integration/test_resume.py).
CLEAN_OPS = """\
process:
  - clean_email_mapper:
  - whitespace_normalization_mapper:
  - words_num_filter:
      min_num: 5
      max_num: 2000
  - text_length_filter:
      min_len: 20
"""

RECIPE_HEAD = """\
project_name: {name}
dataset_path: {data}
export_path: {export}
work_dir: {work}
text_keys: text
partition:
  mode: manual
  num_of_partitions: {parts}
checkpoint:
  enabled: true
  strategy: every_op
"""


#: The second recipe of the concurrency scenario (tests/e2e/test_e2e_rest_api_sqlite.py): other ops than
#: CLEAN_OPS, so its export differs from e2e_clean's.
OTHER_OPS = """\
process:
  - whitespace_normalization_mapper:
  - text_length_filter:
      min_len: 60
"""


def recipe_text(name: str, data: str, export: str, work: str, parts: int, ops: str, schedule: str | None = None) -> str:
    text = RECIPE_HEAD.format(name=name, data=data, export=export, work=work, parts=parts)
    if schedule:
        text += f"schedule: '{schedule}'\n"
    return text + ops


def slow_ops(n: int = SLOW_OPS) -> str:
    """A partition that works for a minute or more, committing a checkpoint every op (0.7-2 s each)."""
    return "process:\n" + "".join("  - fix_unicode_mapper:\n" for _ in range(n))


# -- the direct run (reference) -------------------------------------------------

#: The overrides every triggered run of the clean recipe uses; the reference
#: run applies the same ones with ``--set``.
CONF_PARTITIONS = 3

#: The scheduled recipe's cron: 03:00 on 29 February.
SCHED_CRON = "0 3 29 2 *"


class Reference:
    """``dj-airflow run`` of the clean recipe, started in the background; ``export()`` waits for it."""

    def __init__(self, root: str, corpus: str) -> None:
        self.root = root
        self.export_path = os.path.join(root, "reference.jsonl")
        recipe = os.path.join(root, "reference.yaml")
        with open(recipe, "w") as fh:
            fh.write(recipe_text("e2e_reference", corpus, self.export_path, os.path.join(root, "work"), 4, CLEAN_OPS))
        env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW__") and k != "RAY_ADDRESS"}
        env["AIRFLOW_HOME"] = os.path.join(root, "airflow")
        self.log_path = os.path.join(root, "reference.log")
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [
                    DJ_AIRFLOW,
                    "run",
                    recipe,
                    "--job-id",
                    "ref",
                    # The bytes do not depend on where partitions run; no private Ray beside the server.
                    "--executor",
                    "local",
                    "--set",
                    f"partition.num_of_partitions={CONF_PARTITIONS}",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
            )
        self._bytes: bytes | None = None

    def export(self) -> bytes:
        if self._bytes is None:
            try:
                rc = self.proc.wait(timeout=300)
            finally:
                self.stop()
            with open(self.log_path, encoding="utf-8", errors="replace") as fh:
                log = fh.read()
            assert rc == 0, f"the direct run (dj-airflow run) failed with {rc}:\n{log[-4000:]}"
            with open(self.export_path, "rb") as fh:
                self._bytes = fh.read()
            assert self._bytes.count(b"\n") > CLEAN_ROWS // 2, "the reference export is implausibly small"
        return self._bytes

    def stop(self) -> None:
        from tests.integration.crash_helpers import kill_session

        kill_session(self.proc.pid)  # the run and its private Ray: nothing outlives it
        if self.proc.poll() is None:
            self.proc.wait(timeout=30)


@pytest.fixture(scope="session")
def e2e_inputs(session_dir):
    from airflow_provider_dj.testing.sample_corpus import write_corpus

    root = os.path.join(session_dir, "e2e")
    os.makedirs(root, exist_ok=True)
    corpus = write_corpus(os.path.join(root, "data", "corpus.jsonl"), CLEAN_ROWS, seed=7)
    slow = write_corpus(os.path.join(root, "data", "slow.jsonl"), SLOW_ROWS, seed=8)
    return {"root": root, "corpus": corpus, "slow": slow}


@pytest.fixture(scope="session")
def reference(e2e_inputs):
    root = os.path.join(e2e_inputs["root"], "reference")
    os.makedirs(root, exist_ok=True)
    ref = Reference(root, e2e_inputs["corpus"])
    yield ref
    ref.stop()


# -- PostgreSQL ----------------------------------------------------------------------

PG_SCRIPT = os.path.join(REPO_ROOT, "scripts", "postgres_for_tests.sh")


def _pg_script(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", PG_SCRIPT, *args], capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="session")
def postgres_base_url():
    """The cluster's SQLAlchemy URL: DJ_E2E_POSTGRES_URL (scripts/test.sh sets it) or the script's.

    A cluster this fixture started itself is stopped at the end of the session.
    """
    url = os.environ.get("DJ_E2E_POSTGRES_URL")
    if url:
        yield url
        return
    was_running = _pg_script("status").returncode == 0
    proc = _pg_script()
    url = proc.stdout.strip().splitlines()[-1] if proc.returncode == 0 and proc.stdout.strip() else None
    if url is None:
        why = f"{PG_SCRIPT} exited {proc.returncode}: {proc.stderr.strip()[-1500:]}"
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the PostgreSQL e2e variant, but no PostgreSQL could be started: {why}")
        pytest.skip(
            f"no PostgreSQL for the e2e tests ({why}); run scripts/postgres_for_tests.sh as root, "
            f"or set DJ_E2E_POSTGRES_URL"
        )
    yield url
    if not was_running:
        _pg_script("release")  # stops it unless another session's server still has a database in it


def _fresh_postgres_db(base_url: str) -> tuple[str, callable]:
    """A new, empty database in the cluster for one server; returns (url, drop)."""
    import psycopg2
    from sqlalchemy.engine import make_url

    base = make_url(base_url)
    name = f"dj_e2e_{uuid.uuid4().hex[:10]}"
    args = dict(host=base.host, port=base.port, user=base.username, password=base.password, dbname="postgres")
    conn = psycopg2.connect(**args)
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute(f'CREATE DATABASE "{name}"')
    conn.close()

    def drop() -> None:
        c = psycopg2.connect(**args)
        c.autocommit = True
        with c.cursor() as cur:
            cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        c.close()

    return base.set(database=name).render_as_string(hide_password=False), drop


# -- the server ----------------------------------------------------------------------


@dataclass
class E2E:
    """What a scenario needs: the server's REST client and where its recipes write."""

    db: str
    server: AirflowServer
    client: AirflowRestClient
    root: str
    work: str
    exports: str
    #: Where Airflow's OpenLineage provider writes each event it sends, one file per event (file transport).
    openlineage_dir: str = ""

    def job_dir(self, job_id: str) -> str:
        return os.path.join(self.work, job_id)

    def export_path(self, name: str) -> str:
        return os.path.join(self.exports, f"{name}.jsonl")


E2E_DAGS = ("e2e_clean", "e2e_sched", "e2e_slow", "e2e_other")
#: dags/example_train_on_export.py: runs on each export event of e2e_sched.
CONSUMER_DAG = "example_train_on_export"


#: The metadata DBs a test module may name in ``E2E_DB`` (tests/e2e/test_e2e_rest_api_*.py).
E2E_DBS = ("sqlite", "postgres")


@pytest.fixture(scope="module")
def e2e(request, e2e_inputs):
    """The module's server: ``airflow standalone`` on the metadata DB its ``E2E_DB`` names."""
    db = getattr(request.module, "E2E_DB", None)
    assert db in E2E_DBS, f"{request.module.__name__}: set E2E_DB to one of {E2E_DBS} to use the e2e fixture"
    # The DB first: a PostgreSQL variant that skips should not start anything.
    pg_url = request.getfixturevalue("postgres_base_url") if db == "postgres" else None
    request.getfixturevalue("reference")  # starts the direct run now, in parallel with the server's start-up
    root = os.path.join(e2e_inputs["root"], db)
    recipes, work, exports, ol_dir = (os.path.join(root, d) for d in ("recipes", "work", "exports", "openlineage"))
    for d in (recipes, work, exports, ol_dir):
        os.makedirs(d, exist_ok=True)
    corpus, slow = e2e_inputs["corpus"], e2e_inputs["slow"]
    for name, data, parts, ops, schedule in (
        ("e2e_clean", corpus, 4, CLEAN_OPS, None),
        # Runs on its own once unpaused, exactly once: with catchup off the
        # scheduler runs the cron's latest point (2024-02-29 03:00, after the
        # DAGs' start date) at once, and the next point is years away.  One
        # scheduled run, one export and one Asset event, however long the
        # scenarios before the check take.  A different partition count than
        # the reference on purpose (the export must not change).
        ("e2e_sched", corpus, 1, CLEAN_OPS, SCHED_CRON),
        ("e2e_slow", slow, 1, slow_ops(), None),
        ("e2e_other", corpus, 2, OTHER_OPS, None),
    ):
        with open(os.path.join(recipes, f"{name}.yaml"), "w") as fh:
            fh.write(recipe_text(name, data, os.path.join(exports, f"{name}.jsonl"), work, parts, ops, schedule))
    # A module's own recipes (``e2e_extra_recipes(root, work, exports)`` -> DAG id: recipe text), parsed
    # with the others at start-up: the DAG folder is parsed once, so a recipe written later is not seen.
    extra = getattr(request.module, "e2e_extra_recipes", lambda **_: {})(root=root, work=work, exports=exports)
    for name, text in extra.items():
        with open(os.path.join(recipes, f"{name}.yaml"), "w") as fh:
            fh.write(text)

    # A module's own Airflow cluster policies (``E2E_AIRFLOW_LOCAL_SETTINGS``: the text of
    # $AIRFLOW_HOME/config/airflow_local_settings.py), e.g. retries for one of its DAGs only.
    local_settings = getattr(request.module, "E2E_AIRFLOW_LOCAL_SETTINGS", None)
    if local_settings:
        os.makedirs(os.path.join(root, "airflow", "config"), exist_ok=True)
        with open(os.path.join(root, "airflow", "config", "airflow_local_settings.py"), "w") as fh:
            fh.write(local_settings)

    drop = None
    if db == "sqlite":
        conn = f"sqlite:///{os.path.join(root, 'airflow', 'airflow.db')}"
    else:
        conn, drop = _fresh_postgres_db(pg_url)
    # dags/example_train_on_export.py is scheduled on the scheduled recipe's export Asset.
    server = AirflowServer(
        home=os.path.join(root, "airflow"),
        sql_alchemy_conn=conn,
        recipes_dir=recipes,
        extra_env={
            "DJ_EXAMPLE_TRAIN_RECIPE": os.path.join(recipes, "e2e_sched.yaml"),
            # A cron schedule runs at its points (CronTriggerTimetable, Airflow 3's default), not at
            # the end of an interval that would last until the next point.
            "AIRFLOW__SCHEDULER__CREATE_CRON_DATA_INTERVALS": "False",
            # OpenLineage (the openlineage extra, installed with the test extra): every task's events go to
            # files, one per event, which the scenarios read back (tests/e2e/openlineage_checks.py).  Only the
            # event files are added: the tasks run and end exactly as without it.
            "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps(
                {"type": "file", "log_file_path": os.path.join(ol_dir, "event")}
            ),
            "AIRFLOW__OPENLINEAGE__NAMESPACE": f"e2e_{db}",
            # A module's own server settings (``e2e_server_env(root, work, exports)``), for the scenarios only it has.
            **getattr(request.module, "e2e_server_env", lambda **_: {})(root=root, work=work, exports=exports),
        },
    )
    try:
        client = server.start()
        for dag_id in (*E2E_DAGS, *extra, CONSUMER_DAG):
            client.wait_dag(dag_id)
        # The consumer listens before the first export event can exist.
        client.set_paused(CONSUMER_DAG, False)
        # The scheduled recipe starts now, so its first run overlaps the
        # first scenario instead of adding a minute of waiting.
        client.set_paused("e2e_sched", False)
        yield E2E(db=db, server=server, client=client, root=root, work=work, exports=exports, openlineage_dir=ol_dir)
    finally:
        server.stop()
        if drop is not None:
            drop()


@pytest.fixture(scope="session")
def job_view_server(tmp_path_factory):
    """One ``airflow standalone`` with the job view plugin for tests/e2e/test_job_view.py
    (tests/e2e/job_view_server.py): its start-up is most of their time."""
    from tests.e2e.job_view_server import start_view_server

    vs = start_view_server(str(tmp_path_factory.mktemp("job_view")))
    yield vs
    vs.stop()
