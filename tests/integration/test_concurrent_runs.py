"""Several `dj-airflow run` on one machine at once are independent (issue 12).

Real console scripts, each with its own in-process Ray, on the engine and
(``--airflow``) on real Airflow (``dag.test()``), real files; nothing is mocked.  All runs start in a fresh
Airflow home and a fresh ``$HOME`` (no Ray token yet), as on a new machine,
so they also race for the first-run set-up (the template DB migration,
Airflow's default config, Ray's token file).  Started together:

* three different recipes, plus the first recipe again with another job id
  (and another export path);
* the third run's job id a second time once that run holds its lock: it is
  refused before it starts anything, naming the holder's host and pid;
* ``validate`` and ``monitor`` while they run.

Every export must equal, byte for byte, the export of the same run done on
its own, and nothing of any run may be left behind (private run dirs, Ray
processes).  Rows are few (300): the point is correctness, not speed, on a
loaded two-core machine.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
import time

import pytest

from tests.helpers_compare import assert_same_bytes
from tests.integration.crash_helpers import DJ_AIRFLOW, kill_session, live_session_members, write_faults

pytestmark = pytest.mark.integration

RUN_TIMEOUT = 900  # four Airflows and four Rays on two shared cores

HEAD = """\
project_name: {name}
dataset_path: {data}
export_path: {export}
work_dir: {work}
text_keys: text
partition: {{mode: manual, num_of_partitions: 2}}
checkpoint: {{enabled: true, strategy: every_op}}
"""

OPS = {
    "cc_alpha": """\
process:
  - clean_email_mapper:
  - whitespace_normalization_mapper:
  - words_num_filter: {min_num: 5, max_num: 2000}
""",
    "cc_beta": """\
process:
  - text_length_filter: {min_len: 40}
  - document_deduplicator: {lowercase: true}
""",
    "cc_gamma": """\
process:
  - whitespace_normalization_mapper:
  - words_num_filter: {min_num: 8}
  - document_deduplicator:
""",
}


class Env:
    def __init__(self, root) -> None:
        self.root = root
        self.data = os.path.join(root, "corpus.jsonl")
        self.work = os.path.join(root, "work")
        self.home = os.path.join(root, "home")  # $HOME of every run: no ~/.ray yet
        self.airflow_home = os.path.join(root, "dj-airflow")
        self.state = os.path.join(root, "state")
        self.ray_tmp = tempfile.mkdtemp(prefix="djcc", dir="/tmp")  # Ray's socket paths must be short

    def recipe(self, name: str) -> str:
        path = os.path.join(self.root, f"{name}.yaml")
        if not os.path.exists(path):
            with open(path, "w") as fh:
                fh.write(HEAD.format(name=name, data=self.data, export=self.export(name), work=self.work) + OPS[name])
        return path

    def export(self, name: str) -> str:
        return os.path.join(self.root, "exports", f"{name}.jsonl")

    def env(self) -> dict:
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("AIRFLOW__") and k not in ("AIRFLOW_HOME", "RAY_ADDRESS")
        }
        env.update(
            HOME=self.home,
            DJ_AIRFLOW_HOME=self.airflow_home,
            DJ_STATE_DIR=self.state,
            RAY_TMPDIR=self.ray_tmp,
            DJ_TASK_RETRIES="0",
            PYTHONUNBUFFERED="1",
        )
        return env

    def start(self, *args: str, log: str) -> subprocess.Popen:
        fh = open(os.path.join(self.root, f"{log}.log"), "wb")
        proc = subprocess.Popen(
            [DJ_AIRFLOW, *args],
            stdout=fh,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=self.env(),
            cwd=self.root,
            start_new_session=True,
        )
        proc.log_path = fh.name  # type: ignore[attr-defined]
        fh.close()
        return proc


def _finish(proc: subprocess.Popen, timeout: float = RUN_TIMEOUT) -> tuple[int, str]:
    try:
        rc = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        rc = None
    left = []
    deadline = time.monotonic() + 60  # the run's Ray processes end after it: slowly on a loaded machine
    while time.monotonic() < deadline:
        left = live_session_members(proc.pid)
        if not left:
            break
        time.sleep(0.2)
    kill_session(proc.pid)
    with open(proc.log_path, encoding="utf-8", errors="replace") as fh:  # type: ignore[attr-defined]
        out = fh.read()
    assert rc is not None, f"{proc.args} did not finish in {timeout}s:\n{out[-4000:]}"
    assert left == [], f"processes of {proc.args} outlived it: {left}"
    return rc, out


#: A file in a job dir that ends the hold of :func:`_hold_at_first_op` (faults.py ``until``).
RELEASE = "_test_release"


def _hold_at_first_op() -> dict:
    """Partition 0 holds before its first op until the test writes RELEASE (the bound is a backstop)."""
    return {"point": "op_start", "partition_id": 0, "op_index": 0, "kind": "delay", "seconds": 600, "until": RELEASE}


def _release(job_dir: str) -> None:
    with open(os.path.join(job_dir, RELEASE), "w") as fh:
        fh.write("go")


def _read(path: str) -> bytes:
    with open(path, "rb") as fh:
        return fh.read()


def _wait_for(what: str, probe, timeout: float = RUN_TIMEOUT, procs=()):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = probe()
        if got:
            return got
        for p in procs:
            assert p.poll() is None, f"{p.args} ended (rc {p.returncode}) while waiting for {what}"
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture(scope="module")
def cc(tmp_path_factory):
    from airflow_provider_dj.testing.sample_corpus import write_corpus

    env = Env(str(tmp_path_factory.mktemp("concurrent")))
    os.makedirs(env.home)
    os.makedirs(os.path.dirname(env.export("x")))
    write_corpus(env.data, 300, seed=12)
    yield env
    shutil.rmtree(env.ray_tmp, ignore_errors=True)


@pytest.fixture(scope="module")
def single_exports(cc) -> dict[str, bytes]:
    """Each recipe's export from a run on its own (new job ids, a separate export folder): what the
    concurrent runs must reproduce.  A fixture, so every test that compares against it has it."""
    single = {}
    for name in ("cc_alpha", "cc_beta", "cc_gamma"):
        out_path = os.path.join(cc.root, "exports", f"{name}_single.jsonl")
        rc, out = _finish(
            cc.start(
                "run",
                cc.recipe(name),
                "--job-id",
                f"{name}_single",
                "--executor",  # the bytes do not depend on where partitions run: no Ray for the singles
                "local",
                "--num-cpus",
                "1",
                "--set",
                f"export_path={out_path}",
                log=f"{name}_single",
            )
        )
        assert rc == 0, out[-5000:]
        single[name] = _read(out_path)
    assert all(b.count(b"\n") > 50 for b in single.values()), {k: v.count(b"\n") for k, v in single.items()}
    assert len(set(single.values())) == 3  # three recipes, three different results: a real comparison
    return single


def test_concurrent_runs_are_independent_and_export_what_single_runs_export(cc, single_exports):
    alpha, beta, gamma = (cc.recipe(n) for n in ("cc_alpha", "cc_beta", "cc_gamma"))
    alpha2_export = cc.export("cc_alpha_second")
    # gamma holds at its first op until the test releases it, so a second run of its job id (and the
    # monitor) surely find it running, however slowly they start.
    gamma_dir = os.path.join(cc.work, "gamma1")
    write_faults(gamma_dir, [_hold_at_first_op()])

    # Two runs through Airflow (dag.test, each with its private Airflow home) beside two on the engine:
    # the single runs (single_exports) are on the engine, so the comparison also holds the two paths to one export.
    runs = {
        "alpha1": cc.start("run", "--airflow", alpha, "--job-id", "alpha1", "--num-cpus", "1", log="alpha1"),
        "beta1": cc.start("run", "--airflow", beta, "--job-id", "beta1", "--num-cpus", "1", log="beta1"),
        "gamma1": cc.start("run", gamma, "--job-id", "gamma1", "--num-cpus", "1", log="gamma1"),
        "alpha2": cc.start(
            "run", alpha, "--job-id", "alpha2", "--num-cpus", "1", "--set", f"export_path={alpha2_export}", log="alpha2"
        ),
    }
    validate = cc.start("validate", beta, "--check-input", log="validate")

    # The same job id again, while its first run holds it (in its delay): refused at once, naming the holder.
    _wait_for(
        "gamma1 to hold its lock and sit in its delay",
        lambda: (
            os.path.exists(os.path.join(gamma_dir, "metadata", "runner.lock"))
            and os.path.isdir(os.path.join(gamma_dir, "_fault_injection.fired"))
        ),
        procs=[runs["gamma1"]],
    )
    t0 = time.monotonic()
    rc, out = _finish(cc.start("run", gamma, "--job-id", "gamma1", "--num-cpus", "1", log="gamma1_again"))
    assert rc == 2, out[-3000:]
    assert "being run by another runner" in out
    assert f"host={socket.gethostname()} pid={runs['gamma1'].pid} " in out, out[-3000:]
    assert "Resume token" not in out  # refused before Airflow or Ray started
    assert time.monotonic() - t0 < 120

    # monitor works on a job that another process is running right now.
    rc, out = _finish(cc.start("monitor", "gamma1", "--work-dir", cc.work, log="monitor"))
    assert rc == 0, out[-3000:]
    assert "gamma1" in out
    assert runs["gamma1"].poll() is None, "gamma1 ended while it was held"
    _release(gamma_dir)

    rc, out = _finish(validate)
    assert rc == 0 and "OK:" in out, out[-3000:]

    for job, proc in runs.items():
        rc, out = _finish(proc)
        assert rc == 0, f"{job} failed:\n{out[-5000:]}"
        assert "export:" in out
    concurrent = {
        "cc_alpha": _read(cc.export("cc_alpha")),
        "cc_alpha_second": _read(alpha2_export),
        "cc_beta": _read(cc.export("cc_beta")),
        "cc_gamma": _read(cc.export("cc_gamma")),
    }
    # Every run cleaned up its private Airflow state; the one template DB stays for later runs.
    assert os.listdir(os.path.join(cc.airflow_home, "dj_cli_runs")) == []
    assert [n for n in os.listdir(cc.airflow_home) if n.startswith("dj_cli_template_db_")]
    assert not os.path.exists(os.path.join(cc.airflow_home, "airflow.db"))  # no shared SQLite DB
    # One Ray token for all of them, complete.
    with open(os.path.join(cc.home, ".ray", "auth_token")) as fh:
        assert len(fh.read()) == 64
    # The shared recent-jobs registry kept every run's entry.
    with open(os.path.join(cc.state, "jobs.json")) as fh:
        registered = json.load(fh)["jobs"]
    assert {"alpha1", "alpha2", "beta1", "gamma1"} <= set(registered)
    for job in ("alpha1", "alpha2", "beta1", "gamma1"):
        with open(os.path.join(cc.work, job, "job_summary.json")) as fh:
            assert json.load(fh)["status"] == "completed"

    single = single_exports
    assert concurrent["cc_alpha"] == single["cc_alpha"]
    assert concurrent["cc_alpha_second"] == single["cc_alpha"]
    assert concurrent["cc_beta"] == single["cc_beta"]
    assert concurrent["cc_gamma"] == single["cc_gamma"]
    assert os.listdir(os.path.join(cc.airflow_home, "dj_cli_runs")) == []


def test_two_runs_of_one_job_started_at_the_same_instant_one_wins(cc, single_exports):
    """Neither finds a lock at start-up; the runner lock's guard lets exactly one take it.

    Both runs are the same command (same recipe, same overrides): a job id
    names one job, and the two write identical metadata before the lock
    decides (engine/job/setup.py plans, then locks).
    """
    gamma = cc.recipe("cc_gamma")
    job_dir = os.path.join(cc.work, "tie1")
    export = cc.export("tie")
    # The winner holds at its first op until the loser has exited: the loser's lock attempt surely
    # meets the winner's lock, however far apart the two start on a loaded machine.
    write_faults(job_dir, [_hold_at_first_op()])
    args = ("run", gamma, "--job-id", "tie1", "--num-cpus", "1", "--set", f"export_path={export}")
    a, b = cc.start(*args, log="tie_a"), cc.start(*args, log="tie_b")
    _wait_for("one of the two runs to exit", lambda: a.poll() is not None or b.poll() is not None)
    _release(job_dir)
    (rc_a, out_a), (rc_b, out_b) = _finish(a), _finish(b)
    assert sorted([rc_a, rc_b]) == [0, 2], (out_a[-3000:], out_b[-3000:])
    winner, loser_out = (a, out_b) if rc_a == 0 else (b, out_a)
    assert f"pid={winner.pid} " in loser_out and "being run by another runner" in loser_out, loser_out[-3000:]
    with open(os.path.join(job_dir, "job_summary.json")) as fh:
        summary = json.load(fh)
    assert summary["status"] == "completed" and summary["export"]["path"] == export
    assert_same_bytes(_read(export), single_exports["cc_gamma"])
    assert os.listdir(os.path.join(cc.airflow_home, "dj_cli_runs")) == []


HEAD_RACE = """
import json, sys, time
go_at = float(sys.argv[1])
while time.time() < go_at:
    time.sleep(0.005)
from airflow_provider_dj.hooks.ray import ensure_local_head
print(json.dumps({"address": ensure_local_head(num_cpus=1)}))
"""


def test_scheduler_tasks_racing_to_start_the_shared_ray_head_start_one(tmp_path):
    """Three task processes find no head at the same instant: one starts it, the others connect to it."""
    import sys

    from tests.e2e.airflow_server import stop_ray_head
    from tests.ports import free_port

    state = str(tmp_path / "ray-state")
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(DJ_RAY_STATE_DIR=state, DJ_RAY_HEAD_PORT=str(free_port()))
    go_at = time.time() + 3.0
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", HEAD_RACE, str(go_at)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
        )
        for _ in range(3)
    ]
    try:
        answers = []
        for p in procs:
            out, err = p.communicate(timeout=300)
            assert p.returncode == 0, err.decode()[-3000:]
            answers.append(json.loads(out.decode().strip().splitlines()[-1])["address"])
        assert len(set(answers)) == 1 and answers[0].endswith(":" + env["DJ_RAY_HEAD_PORT"])
        with open(os.path.join(state, "ray-head.json")) as fh:
            record = json.load(fh)
        assert record["address"] == answers[0] and record["ready"] is True
        with open(os.path.join(state, "ray-head.log"), encoding="utf-8", errors="replace") as fh:
            assert fh.read().count("Local node IP") == 1  # one `ray start`, not three
    finally:
        stop_ray_head(state)


HISTORY_RECIPE = """\
project_name: {name}
dataset_path: {data}
export_path: {export}
work_dir: {work}
partition: {{mode: manual, num_of_partitions: 2}}
dedup_history: {{path: {history}, ops: [document_deduplicator]}}
process:
{ops}  - document_deduplicator: {{lowercase: true}}
"""


def _expected_night(rows: list[dict], history_keys: set[str]) -> tuple[list[str], int]:
    """What one night exports (ids) and how many history duplicates it has: the first occurrence of each
    key in the night, less those an earlier export holds (docs/nightly.md#what-counts-as-a-history-duplicate)."""
    seen: set[str] = set()
    kept, history = [], 0
    for r in rows:
        key = r["text"].lower().strip()
        if key in seen:
            continue
        seen.add(key)
        if key in history_keys:
            history += 1
        else:
            kept.append(r["id"])
    return kept, history


def test_two_corpora_sharing_one_history_started_at_once_both_commit(cc):
    """Two nightly jobs of different recipes and corpora, one dedup_history.path and one work_dir, started
    at the same instant: both finish, the index ends with both commits (no lost update), every shard is
    intact, and each job's history duplicates are the ones its pinned version holds."""
    import xxhash

    from airflow_provider_dj.testing.sample_corpus import write_corpus

    history = os.path.join(cc.root, "history")
    paths = {n: os.path.join(cc.root, f"hist_{n}.jsonl") for n in ("seed", "a", "b")}
    write_corpus(paths["seed"], 150, seed=21)
    seed_rows = [json.loads(line) for line in open(paths["seed"])]
    nights = {}
    for n, seed, copies in (("a", 31, seed_rows[:10]), ("b", 41, seed_rows[10:16])):
        write_corpus(paths[n], 120, seed=seed)
        rows = [dict(json.loads(line), id=f"{n}-{i}") for i, line in enumerate(open(paths[n]))]  # ids: one type
        shared = [
            {"id": f"shared-{i}", "text": f"a row that arrives on both corpora the same night, number {i}"}
            for i in range(3)
        ]
        rows += [dict(r, id=f"{n}-copy-{r['id']}") for r in copies] + shared
        with open(paths[n], "w") as fh:
            fh.writelines(json.dumps(r) + "\n" for r in rows)
        nights[n] = rows

    def recipe(name: str, data: str, ops: str) -> str:
        path = os.path.join(cc.root, f"{name}.yaml")
        with open(path, "w") as fh:
            fh.write(
                HISTORY_RECIPE.format(
                    name=name, data=data, export=cc.export(name), work=cc.work, history=history, ops=ops
                )
            )
        return path

    seed_recipe = recipe("hist_seed", paths["seed"], "")
    # The engine's local executor: what is tested is the history's commits, not where partitions run.
    local = ("--executor", "local", "--num-cpus", "1")
    rc, out = _finish(cc.start("run", seed_recipe, "--job-id", "hist_seed", *local, log="hist_seed"))
    assert rc == 0, out[-3000:]
    seed_export = [json.loads(line) for line in open(cc.export("hist_seed"))]
    history_keys = {r["text"].lower().strip() for r in seed_export}

    recipes = {
        "a": recipe("hist_a", paths["a"], "  - text_length_filter: {min_len: 0}\n"),
        "b": recipe("hist_b", paths["b"], "  - words_num_filter: {min_num: 0, max_num: 100000}\n"),
    }
    procs = {n: cc.start("run", r, "--job-id", f"hist_{n}", *local, log=f"hist_{n}") for n, r in recipes.items()}
    for n, proc in procs.items():
        rc, out = _finish(proc)
        assert rc == 0, f"hist_{n} failed:\n{out[-5000:]}"

    with open(os.path.join(history, "CURRENT")) as fh:
        current = json.load(fh)["version"]
    assert current == 3  # seed, then both nights: neither commit replaced the other
    manifest = json.load(open(os.path.join(history, "versions", "v000003", "manifest.json")))
    assert sorted(j["job_id"] for j in manifest["jobs"]) == ["hist_a", "hist_b", "hist_seed"]
    exports = {n: [json.loads(line) for line in open(cc.export(f"hist_{n}"))] for n in ("a", "b")}
    held = manifest["ops"]["document_deduplicator"]
    assert held["entries"] == len(seed_export) + len(exports["a"]) + len(exports["b"])
    for files in held["shards"].values():  # every shard of the last version is complete and unchanged
        for f in files:
            data = open(os.path.join(history, *f["file"].split("/")), "rb").read()
            assert len(data) == f["bytes"] and xxhash.xxh3_128_hexdigest(data) == f["xxh3_128"], f["file"]
    summaries = {n: json.load(open(os.path.join(cc.work, f"hist_{n}", "job_summary.json"))) for n in ("a", "b")}
    commits = {n: summaries[n]["dedup_history"]["commit"] for n in ("a", "b")}
    for n, other in (("a", "b"), ("b", "a")):
        # Each job checks its rows against the version it pinned when it started: the seed's (1), or, when
        # the other job had already committed by then (the two start together, but either may be first),
        # the version that commit made, which holds the other's rows too.
        keys = set(history_keys)
        if commits[n]["pinned_version"] >= commits[other]["version"]:
            keys |= {r["text"].lower().strip() for r in exports[other]}
        kept, n_history = _expected_night(nights[n], keys)
        assert [r["id"] for r in exports[n]] == kept, n  # the filters before it keep every row
        assert summaries[n]["dedup_history"]["ops"][0]["history_duplicates"] == n_history > 0
    assert sorted(c["pinned_version"] for c in commits.values())[0] == 1  # the first to commit pinned the seed's
    # The rows both corpora got are exported by every job that pinned the seed's version (at least one).
    shared = {"shared-0", "shared-1", "shared-2"}
    for n in ("a", "b"):
        if commits[n]["pinned_version"] == 1:
            assert shared <= {r["id"] for r in exports[n]}, n
    commits = list(commits.values())
    assert sorted(c["version"] for c in commits) == [2, 3]
    assert sorted(c["base_version"] for c in commits) == [1, 2]  # the later commit built on the earlier one
