"""End to end: the nightly drill (issue 14) on one real ``airflow standalone``, both ways teams run nightly jobs.

Scheduled recipes (``schedule: "0 3 * * *"``), templated on ``{{ ds }}``.  Each night is a DAG run with an
explicit logical date triggered over REST, the run a scheduled night (or a backfill) of that date is:
night 1 on 2026-11-29, then night 2's files arrive, then night 2 on 2026-11-30.

* **Accumulating** (``nightly_acc``): ``dataset_path`` is the whole growing folder, each night exports the
  full clean corpus, ``partition.align: file`` + ``reuse_across_jobs``.  Night 2 sees night 1's files plus a
  new file of 5% more rows (exact and near duplicates of night-1 rows among them): it reuses night 1's
  partitions, computes the new file's, and exports the bytes of a from-scratch ``dj-airflow run``.
* **Delta** (``nightly_delta``, ``document_deduplicator``): ``dataset_path`` is tonight's folder,
  ``dedup_history`` on.  Night 1's export followed by night 2's equals, row for row, a from-scratch run over
  both nights' input, and each history duplicate names night 1's job and export row.
* **Delta, MinHash** (``nightly_delta_minhash``): no row of night 2's export shares an LSH band (the op's
  criterion) with a row of night 1's, and each history duplicate names the night-1 row and band it matched.
  Its night 1 is a ``dj-airflow run --logical-date 2026-11-29`` of the same recipe file (the way a backfill
  from the command line runs), so the module has five DAG runs, not six: every run on standalone costs
  about a minute on a loaded two-core machine.

The from-scratch references (and MinHash's night 1) run with ``dj-airflow run`` in the background while the
server starts.  Runs of different recipes overlap (``max_active_runs=1`` is per DAG).  One server, SQLite.
Nothing is mocked.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from datetime import datetime, timezone

import httpx
import numpy as np
import pytest

from tests.e2e.airflow_server import AirflowServer
from tests.e2e.conftest import DJ_AIRFLOW
from tests.e2e.rest_client import TERMINAL_RUN_STATES, RestError
from tests.helpers_compare import assert_same_bytes
from tests.integration.crash_helpers import kill_session

pytestmark = pytest.mark.e2e

RUN_TIMEOUT = 900  # five runs on two cores shared with several engineers
NIGHT1, NIGHT2 = "2026-11-29", "2026-11-30"
# The logical date a "0 3 * * *" schedule gives each night's run (CronTriggerTimetable: the cron point).
LOGICAL = {NIGHT1: "2026-11-29T03:00:00+00:00", NIGHT2: "2026-11-30T03:00:00+00:00"}
ACC_ROWS, ACC_FILES, ACC_NEW_ROWS = 150, 2, 15  # night 2 adds 5%
DELTA_ROWS, DELTA_FILES, DELTA_NEW_ROWS = 120, 2, 60

ACC = """\
project_name: nightly_acc
schedule: "0 3 * * *"
dataset_path: @BASE@/input/*.jsonl
export_path: "@BASE@/out/{{ ds }}.jsonl"
work_dir: @BASE@/work
text_keys: text
partition: {mode: manual, size: 75, align: file}
intermediate_storage: {reuse_across_jobs: true}
process:
  - clean_email_mapper:
  - words_num_filter: {min_num: 5}
  - document_deduplicator: {lowercase: true}
"""

DELTA_OPS = {
    "document_deduplicator": "{lowercase: true}",
    "document_minhash_deduplicator": "{window_size: 2, num_permutations: 32, num_bands: 16, num_rows_per_band: 2}",
}
MINHASH_ARGS = {"window_size": 2, "num_permutations": 32, "num_bands": 16, "num_rows_per_band": 2}

DELTA = """\
project_name: @NAME@
schedule: "0 3 * * *"
dataset_path: "@DATA@"
export_path: "@OUT@"
work_dir: @WORK@
text_keys: text
partition: {mode: manual, size: 60, align: file}
process:
  - words_num_filter: {min_num: 5}
  - @OP@: @ARGS@
"""


def _fill(text: str, **values: str) -> str:
    for key, value in values.items():
        text = text.replace(f"@{key}@", value)
    return text


def _delta_recipe(name: str, op: str, data: str, out: str, work: str, history: str | None) -> str:
    text = _fill(DELTA, NAME=name, DATA=data, OUT=out, WORK=work, OP=op, ARGS=DELTA_OPS[op])
    if history:
        text += f"dedup_history:\n  path: {history}\n  ops: [{op}]\n"
    return text


def _read(path: str) -> bytes:
    with open(path, "rb") as fh:
        return fh.read()


def _rows(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def _texts(paths: list[str]) -> list[str]:
    return [r["text"] for p in paths for r in _rows(p)]


class DirectRuns:
    """``dj-airflow run``s one after the other in one background shell (started while the server starts)."""

    def __init__(self, root: str, cmds: list[list[str]]) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW__") and k != "RAY_ADDRESS"}
        env["AIRFLOW_HOME"] = os.path.join(root, "airflow")
        script = "\n".join(" ".join(cmd) + " || exit $?" for cmd in cmds)
        self.log_path = os.path.join(root, "direct.log")
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                ["bash", "-c", script],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
            )
        self.started = time.monotonic()
        self.wall_s: float | None = None

    def wait(self) -> None:
        try:
            rc = self.proc.wait(timeout=RUN_TIMEOUT)
        finally:
            self.stop()
        self.wall_s = self.wall_s or time.monotonic() - self.started
        with open(self.log_path, encoding="utf-8", errors="replace") as fh:
            log = fh.read()
        assert rc == 0, f"a direct run (dj-airflow run) failed ({rc}):\n{log[-4000:]}"

    def stop(self) -> None:
        kill_session(self.proc.pid)  # the runs and their private Ray: nothing outlives them


@pytest.fixture(scope="module")
def drill(session_dir):
    from airflow_provider_dj.testing.sample_corpus import write_corpus, write_growth_file

    root = os.path.join(session_dir, "e2e_nightly")
    recipes_dir = os.path.join(root, "recipes")
    os.makedirs(recipes_dir, exist_ok=True)
    os.makedirs(os.path.join(root, "direct"), exist_ok=True)
    acc, acc_ref = os.path.join(root, "acc"), os.path.join(root, "acc_ref")
    delta, delta_ref = os.path.join(root, "delta"), os.path.join(root, "delta_ref")

    # Accumulating: night 1's files now; night 2's new file (written to the live folder after night 1)
    # goes to the from-scratch reference's copy of the folder at once.
    acc_n1 = [
        write_corpus(os.path.join(acc, "input", f"{NIGHT1}_{i}.jsonl"), ACC_ROWS, seed=30 + i) for i in range(ACC_FILES)
    ]
    acc_new = write_growth_file(
        os.path.join(root, "arrivals", f"acc_{NIGHT2}_0.jsonl"), _texts(acc_n1), ACC_NEW_ROWS, seed=33, dup_rate=0.4
    )
    for p in (*acc_n1, acc_new):
        name = os.path.basename(p).removeprefix("acc_")
        os.makedirs(os.path.join(acc_ref, "input"), exist_ok=True)
        shutil.copy(p, os.path.join(acc_ref, "input", name))
    # Delta: each night's own folder; both nights' files in one folder for the from-scratch run.
    d_n1 = [
        write_corpus(os.path.join(delta, NIGHT1, f"part{i}.jsonl"), DELTA_ROWS, seed=40 + i) for i in range(DELTA_FILES)
    ]
    d_new = write_growth_file(
        os.path.join(root, "arrivals", "delta_part0.jsonl"), _texts(d_n1), DELTA_NEW_ROWS, seed=43
    )
    os.makedirs(os.path.join(delta_ref, "input"), exist_ok=True)
    for p, name in [(p, f"{NIGHT1}_{os.path.basename(p)}") for p in d_n1] + [(d_new, f"{NIGHT2}_part0.jsonl")]:
        shutil.copy(p, os.path.join(delta_ref, "input", name))
    # The growth files hold exact and near duplicates of night-1 rows (what night 2 must handle).
    for new, old in ((acc_new, acc_n1), (d_new, d_n1)):
        old_texts = set(_texts(old))
        assert any(t in old_texts for t in _texts([new])), f"{new} repeats no night-1 row exactly"

    tmpl = "{{ ds }}"
    recipes = {
        "nightly_acc": _fill(ACC, BASE=acc),
        "nightly_delta": _delta_recipe(
            "nightly_delta",
            "document_deduplicator",
            f"{delta}/{tmpl}/*.jsonl",
            f"{delta}/out/{tmpl}.jsonl",
            f"{delta}/work",
            f"{delta}/history",
        ),
        "nightly_delta_minhash": _delta_recipe(
            "nightly_delta_minhash",
            "document_minhash_deduplicator",
            f"{delta}/{tmpl}/*.jsonl",
            f"{delta}/mh_out/{tmpl}.jsonl",
            f"{delta}/mh_work",
            f"{delta}/mh_history",
        ),
    }
    for name, text in recipes.items():
        with open(os.path.join(recipes_dir, f"{name}.yaml"), "w") as fh:
            fh.write(text)
    refs = {
        "acc_ref.yaml": _fill(ACC, BASE=acc_ref),
        "delta_ref.yaml": _delta_recipe(
            "nightly_delta",
            "document_deduplicator",
            f"{delta_ref}/input/*.jsonl",
            f"{delta_ref}/out.jsonl",
            f"{delta_ref}/work",
            None,
        ),
    }
    for name, text in refs.items():
        with open(os.path.join(root, "direct", name), "w") as fh:
            fh.write(text)
    # On the engine's local executor: the references' bytes do not depend on where partitions run, and a
    # private Ray per direct run would only compete with the server for the two cores.
    run = [DJ_AIRFLOW, "run", "--executor", "local", "--num-cpus", "1"]
    direct = DirectRuns(
        os.path.join(root, "direct"),
        [
            # MinHash's night 1 first: night 2's DAG run needs its history.
            [
                *run,
                os.path.join(recipes_dir, "nightly_delta_minhash.yaml"),
                "--job-id",
                "mh_night1",
                "--logical-date",
                LOGICAL[NIGHT1],
            ],
            [*run, os.path.join(root, "direct", "delta_ref.yaml"), "--job-id", "delta_scratch"],
            [
                *run,
                os.path.join(root, "direct", "acc_ref.yaml"),
                "--job-id",
                "acc_scratch",
                "--logical-date",
                LOGICAL[NIGHT2],
            ],
        ],
    )
    server = AirflowServer(
        home=os.path.join(root, "airflow"),
        sql_alchemy_conn=f"sqlite:///{os.path.join(root, 'airflow', 'airflow.db')}",
        recipes_dir=recipes_dir,
        # The scheduler creates no runs of its own: unpausing a DAG whose catchup is off runs its latest cron
        # point at once (today's 03:00), which would read today's folder and, for the accumulating recipe,
        # publish reuse entries before night 1.  Triggered runs still run; the DAG keeps its timetable.
        # Each night's partitions (up to five) in one mapped partition task per segment: this module is about
        # what the nights reuse and deduplicate, not the per-partition task shape (the REST scenarios' subject),
        # and every task instance is a process with its own Ray driver on two shared cores.
        extra_env={"AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE": "False", "AIRFLOW__DJ__DEFAULT_GROUP_SIZE": "8"},
    )
    try:
        # Its client's per-request timeout outlasts the server's SQLite busy timeout (rest_client.py).
        client = server.start()
        for dag_id in recipes:
            dag = client.wait_dag(dag_id)
            assert "0 3 * * *" in str(dag.get("timetable_summary")), dag  # the recipe's schedule
            client.set_paused(dag_id, False)
        yield {
            "client": client,
            "server": server,
            "direct": direct,
            "root": root,
            "acc": acc,
            "acc_ref": acc_ref,
            "delta": delta,
            "delta_ref": delta_ref,
            "acc_new": acc_new,
            "d_new": d_new,
        }
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


def _wait_runs(d, runs: dict[str, str]) -> None:
    """Wait until every (dag_id -> run_id) run ends; each must succeed.  A slow answer is asked again."""
    client, deadline = d["client"], time.monotonic() + RUN_TIMEOUT
    pending = dict(runs)
    while pending and time.monotonic() < deadline:
        for dag_id, run_id in list(pending.items()):
            try:
                run = client.dag_run(dag_id, run_id)
            except (httpx.TransportError, RestError):
                continue
            if run["state"] in TERMINAL_RUN_STATES:
                assert run["state"] == "success", _explain(d["server"], client, dag_id, run_id)
                del pending[dag_id]
        time.sleep(2)
    assert not pending, f"runs did not end in {RUN_TIMEOUT}s: {pending}"


def _night(d, dag_ids: tuple[str, ...], night: str) -> dict[str, str]:
    """Trigger each DAG's run of that night (its logical date, no conf), wait for all; returns dag_id -> job id."""
    from airflow_provider_dj.engine.jobdir.identity import job_id_for_run

    runs = {}
    for dag_id in dag_ids:
        run = d["client"].trigger(dag_id, logical_date=LOGICAL[night])
        assert run["run_type"] == "manual" and run["logical_date"].startswith(night), run
        runs[dag_id] = run["dag_run_id"]
    _wait_runs(d, runs)
    when = datetime.fromisoformat(LOGICAL[night]).astimezone(timezone.utc)
    return {dag_id: job_id_for_run(dag_id, run_id, when) for dag_id, run_id in runs.items()}


def _summary(work: str, job_id: str) -> dict:
    with open(os.path.join(work, job_id, "job_summary.json")) as fh:
        return json.load(fh)


def _bands(texts: list[str]) -> np.ndarray:
    import pyarrow as pa

    from airflow_provider_dj.ops.registry import create_op

    op = create_op("document_minhash_deduplicator", dict(MINHASH_ARGS), "text")
    t = op.compute_hash(pa.table({"text": texts}))
    return np.stack([t.column(c).to_numpy() for c in op.band_columns], axis=1)


def test_two_nights_accumulating_and_delta_on_a_scheduled_standalone(drill):
    from airflow_provider_dj.engine.history.lookup import read_history_duplicates

    d = drill
    acc, delta = d["acc"], d["delta"]
    # -- night 1 (MinHash's night 1 is the background `dj-airflow run`) ---------------------------------
    jobs1 = _night(d, ("nightly_acc", "nightly_delta"), NIGHT1)
    acc1 = _read(os.path.join(acc, "out", f"{NIGHT1}.jsonl"))
    e1 = _rows(os.path.join(delta, "out", f"{NIGHT1}.jsonl"))
    assert acc1.count(b"\n") > ACC_ROWS and len(e1) > DELTA_ROWS  # most of each night's rows pass

    # -- night 2's files arrive -----------------------------------------------------------------------
    shutil.copy(d["acc_new"], os.path.join(acc, "input", f"{NIGHT2}_0.jsonl"))
    os.makedirs(os.path.join(delta, NIGHT2))
    shutil.copy(d["d_new"], os.path.join(delta, NIGHT2, "part0.jsonl"))
    d["direct"].wait()  # MinHash's night 1 and the from-scratch references
    jobs2 = _night(d, ("nightly_acc", "nightly_delta", "nightly_delta_minhash"), NIGHT2)

    # -- accumulating: night 2 reuses night 1, computes the new file, exports the from-scratch bytes ---
    acc2 = _read(os.path.join(acc, "out", f"{NIGHT2}.jsonl"))
    assert_same_bytes(acc2, _read(os.path.join(d["acc_ref"], "out", f"{NIGHT2}.jsonl")))
    new_rows = acc2.count(b"\n") - acc1.count(b"\n")
    # Old first occurrences cannot move: night 1's export is the start of night 2's, then the new file's
    # rows that are neither filtered nor duplicates (the growth file repeats night-1 rows exactly).
    assert acc2.startswith(acc1) and 0 < new_rows < ACC_NEW_ROWS
    reuse = _summary(os.path.join(acc, "work"), jobs2["nightly_acc"])["reuse"]
    assert reuse["partitions_reused"] == ACC_FILES * 2  # 150 rows a file, partitions of 75
    assert reuse["computed_partitions"] == 1  # the new file's 15 rows
    assert reuse["source_jobs"] == [jobs1["nightly_acc"]]
    assert reuse["checkpoints_reused"] > 0 and reuse["bytes_reused"] > 0
    assert _summary(os.path.join(acc, "work"), jobs1["nightly_acc"]).get("reuse", {}).get("partitions_reused", 0) == 0
    # The export Asset's events say which file each night wrote, and for which logical date.
    events = sorted(d["client"].asset_events("nightly_acc"), key=lambda e: e["timestamp"])
    assert [e["extra"]["export_path"] for e in events] == [os.path.join(acc, "out", f"{n}.jsonl") for n in LOGICAL]
    assert [e["extra"]["rendered_for_logical_date"][:10] for e in events] == [NIGHT1, NIGHT2]
    assert {e["extra"]["export_path_template"] for e in events} == {os.path.join(acc, "out", "{{ ds }}.jsonl")}

    # -- delta, exact: night 1 + night 2 == one run over both nights --------------------------------------
    n1_export = os.path.join(delta, "out", f"{NIGHT1}.jsonl")
    e2 = _rows(os.path.join(delta, "out", f"{NIGHT2}.jsonl"))
    assert e1 + e2 == _rows(os.path.join(d["delta_ref"], "out.jsonl"))
    job2_dir = os.path.join(delta, "work", jobs2["nightly_delta"])
    hist = _summary(os.path.join(delta, "work"), jobs2["nightly_delta"])["dedup_history"]
    (split,) = hist["ops"]
    dups = read_history_duplicates(job2_dir, split["op_index"], "document_deduplicator").to_pylist()
    assert split["op_name"] == "document_deduplicator" and split["history_duplicates"] == len(dups) > 0
    assert split["duplicates"] == split["history_duplicates"] + split["in_night_duplicates"]
    assert hist["commit"]["version"] == 2 and hist["commit"]["pinned_version"] == 1
    inputs = _rows(os.path.join(delta, NIGHT2, "part0.jsonl"))
    for dup in dups:  # each names night 1's job, export and the export row with the same (lowercased) text
        assert (dup["history_job_id"], dup["history_export_path"]) == (jobs1["nightly_delta"], n1_export)
        assert e1[dup["history_export_row"]]["text"].lower() == inputs[dup["__dj__input_row__"]]["text"].lower()
    assert not {r["text"].lower() for r in e1} & {r["text"].lower() for r in e2}

    # -- delta, MinHash: no band shared across the two exports; each history duplicate names its row ----
    m1 = _rows(os.path.join(delta, "mh_out", f"{NIGHT1}.jsonl"))
    m2 = _rows(os.path.join(delta, "mh_out", f"{NIGHT2}.jsonl"))
    b1, b2 = _bands([r["text"] for r in m1]), _bands([r["text"] for r in m2])
    assert len(m1) > DELTA_ROWS and len(m2) > 0
    assert not (b1[:, None, :] == b2[None, :, :]).any()
    mh_job = os.path.join(delta, "mh_work", jobs2["nightly_delta_minhash"])
    (mh_split,) = _summary(os.path.join(delta, "mh_work"), jobs2["nightly_delta_minhash"])["dedup_history"]["ops"]
    mh_dups = read_history_duplicates(mh_job, mh_split["op_index"], "document_minhash_deduplicator").to_pylist()
    assert mh_split["history_duplicates"] == len(mh_dups) > 0
    for dup in mh_dups:
        assert dup["history_job_id"] == "mh_night1"
        assert dup["history_export_path"] == os.path.join(delta, "mh_out", f"{NIGHT1}.jsonl")
        mine = _bands([inputs[dup["__dj__input_row__"]]["text"]])[0]
        assert mine[dup["band"]] == b1[dup["history_export_row"]][dup["band"]]  # the named row, the named band
