"""End to end: several DAG runs at once on one real ``airflow standalone`` (issue 12).

Two recipes are triggered at the same moment, each twice with different
``job_id``s in the conf (and different export paths), all through the REST
API.  Every run must succeed and export, byte for byte, what a direct
``dj-airflow run`` of the same recipe exports alone.  The direct runs go
one after the other, in the background, while the server starts.

One server for the module, with SQLite as its metadata DB (the harder case
for concurrent writers; the PostgreSQL variant of the REST scenarios is in
rest_api_scenarios.py).  Nothing is mocked.

Runs of one recipe are one DAG, and the generated DAGs allow one active
run at a time (``max_active_runs=1`` in dag_factory.py): the second run of
a recipe is queued, not refused, and runs when the first is done.  Runs of
different recipes overlap.
"""

from __future__ import annotations

import os
import subprocess
import time

import httpx
import pytest

from tests.e2e.airflow_server import AirflowServer
from tests.e2e.conftest import CLEAN_OPS, DJ_AIRFLOW, recipe_text
from tests.e2e.rest_client import TERMINAL_RUN_STATES, RestError
from tests.integration.crash_helpers import kill_session

pytestmark = pytest.mark.e2e

RUN_TIMEOUT = 900  # four runs on two cores shared with several engineers
ROWS = 400

OTHER_OPS = """\
process:
  - whitespace_normalization_mapper:
  - text_length_filter:
      min_len: 60
"""

RECIPES = {"e2e_cc_one": (CLEAN_OPS, 3), "e2e_cc_two": (OTHER_OPS, 2)}


class DirectRuns:
    """``dj-airflow run`` of each recipe, one after the other, in one background shell (on the engine's
    local executor: the bytes do not depend on where partitions run, and a private Ray per run would
    only compete with the server for the two cores)."""

    def __init__(self, root: str, recipes: dict[str, str]) -> None:
        self.exports = {name: os.path.join(root, f"{name}_direct.jsonl") for name in recipes}
        env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW__") and k != "RAY_ADDRESS"}
        env["AIRFLOW_HOME"] = os.path.join(root, "airflow")
        cmds = [
            f"{DJ_AIRFLOW} run {path} --job-id {name}_direct --executor local --num-cpus 1 "
            f"--set export_path={self.exports[name]} || exit $?"
            for name, path in recipes.items()
        ]
        self.log_path = os.path.join(root, "direct.log")
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                ["bash", "-c", "\n".join(cmds)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
            )

    def export(self, name: str) -> bytes:
        try:
            rc = self.proc.wait(timeout=RUN_TIMEOUT)
        finally:
            self.stop()
        with open(self.log_path, encoding="utf-8", errors="replace") as fh:
            log = fh.read()
        assert rc == 0, f"a direct run failed ({rc}):\n{log[-4000:]}"
        with open(self.exports[name], "rb") as fh:
            return fh.read()

    def stop(self) -> None:
        kill_session(self.proc.pid)


@pytest.fixture(scope="module")
def cc(session_dir):
    from airflow_provider_dj.testing.sample_corpus import write_corpus

    root = os.path.join(session_dir, "e2e_concurrent")
    recipes_dir, work, exports = (os.path.join(root, d) for d in ("recipes", "work", "exports"))
    for d in (recipes_dir, work, exports):
        os.makedirs(d, exist_ok=True)
    corpus = write_corpus(os.path.join(root, "corpus.jsonl"), ROWS, seed=21)
    paths = {}
    for name, (ops, parts) in RECIPES.items():
        paths[name] = os.path.join(recipes_dir, f"{name}.yaml")
        with open(paths[name], "w") as fh:
            fh.write(recipe_text(name, corpus, os.path.join(exports, f"{name}.jsonl"), work, parts, ops))
    os.makedirs(os.path.join(root, "direct"))
    direct = DirectRuns(os.path.join(root, "direct"), paths)  # meanwhile the server starts
    server = AirflowServer(
        home=os.path.join(root, "airflow"),
        sql_alchemy_conn=f"sqlite:///{os.path.join(root, 'airflow', 'airflow.db')}",
        recipes_dir=recipes_dir,
        # Four runs start their tasks at once against one SQLite DB: on a loaded
        # two-core machine the execution API answers a task's start call in
        # more than the default 5 s, and the retried call then finds the task
        # already started.  A slow answer is not a broken one.
        extra_env={"AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "120"},
    )
    try:
        # Its client's per-request timeout outlasts the server's SQLite busy timeout (rest_client.py).
        client = server.start()
        for dag_id in RECIPES:
            client.wait_dag(dag_id)
            client.set_paused(dag_id, False)
        yield {"client": client, "server": server, "direct": direct, "work": work, "exports": exports}
    finally:
        server.stop()
        direct.stop()


def _explain(server: AirflowServer, client, dag_id: str, run_id: str) -> str:
    lines = []
    for ti in sorted(client.task_instances(dag_id, run_id), key=lambda t: (t["task_id"], t["map_index"])):
        lines.append(f"  {ti['task_id']}[{ti['map_index']}] {ti['state']} try {ti['try_number']}")
        if ti["state"] == "failed":
            lines.append(server.task_log(dag_id, run_id, ti["task_id"], ti["map_index"], max(ti["try_number"], 1)))
    return "\n".join(lines)


def _wait_run(client, dag_id: str, run_id: str) -> dict:
    """Poll until the run ends; a slow answer (a busy API server) is a reason to ask again, not to fail."""
    deadline = time.monotonic() + RUN_TIMEOUT
    last = None
    while time.monotonic() < deadline:
        try:
            last = client.dag_run(dag_id, run_id)
        except (httpx.TransportError, RestError) as exc:
            last = exc
        else:
            if last["state"] in TERMINAL_RUN_STATES:
                return last
        time.sleep(2)
    raise AssertionError(f"run {dag_id}/{run_id} did not end in {RUN_TIMEOUT}s; last answer: {last!r}")


def test_two_recipes_and_two_job_ids_at_once_export_what_single_runs_export(cc):
    c = cc["client"]
    runs = {}
    for name in RECIPES:
        for job in ("a", "b"):
            job_id = f"{name}_{job}"
            export = os.path.join(cc["exports"], f"{job_id}.jsonl")
            run = c.trigger(name, {"job_id": job_id, "export_path": export})
            runs[job_id] = (name, run["dag_run_id"], export)

    finals = {}
    for job_id, (name, run_id, _export) in runs.items():
        finals[job_id] = _wait_run(c, name, run_id)
        assert finals[job_id]["state"] == "success", _explain(cc["server"], c, name, run_id)

    # Different recipes ran at the same time: their first runs overlap.
    one, two = finals["e2e_cc_one_a"], finals["e2e_cc_two_a"]
    assert one["start_date"] < two["end_date"] and two["start_date"] < one["end_date"], (one, two)

    direct = {name: cc["direct"].export(name) for name in RECIPES}
    assert direct["e2e_cc_one"] != direct["e2e_cc_two"] and all(b.count(b"\n") > 50 for b in direct.values())
    for job_id, (name, _run_id, export) in runs.items():
        with open(export, "rb") as fh:
            assert fh.read() == direct[name], f"{job_id}'s export differs from {name} run alone"
        assert os.path.exists(os.path.join(cc["work"], job_id, "job_summary.json"))
    for name in RECIPES:  # the recipes' own export paths were overridden by every run
        assert not os.path.exists(os.path.join(cc["exports"], f"{name}.jsonl"))
