"""Multi-node Ray: a head and worker nodes as separate processes, reached through a ``ray`` Airflow connection.

The head advertises no CPUs, so every partition task runs on a worker node.
Mid-job the worker node is killed with SIGKILL (its raylet, object store and
workers: a machine going away).  The partition task fails, Airflow retries
it, a replacement worker node joins, and the retry resumes from the
partitions' checkpoints on the shared work dir; the deduplicator's global
step then runs in three key shards on the worker node that replaced it, as the
partitions' hashes of planning ran on the cluster.  The export must be
byte-identical to a clean single-node run with the step in one process.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from airflow_provider_dj.engine.jobdir.events import read_events
from airflow_provider_dj.hooks import ray_in_process
from tests.helpers_compare import assert_same_bytes
from tests.integration.conftest import RECIPE
from tests.integration.crash_helpers import kill_session, run_cli, tail, write_faults
from tests.integration.ray_jobs_cluster import node_port_args
from tests.ports import free_port

pytestmark = pytest.mark.integration

RAY = os.path.join(os.path.dirname(sys.executable), "ray")
DJ_AIRFLOW = os.path.join(os.path.dirname(sys.executable), "dj-airflow")


def ray_env() -> dict:
    """Ray 2.5x+ turns token auth on for `ray start` when ~/.ray/auth_token exists;
    every node and driver of the cluster must then present the token."""
    env = dict(os.environ)
    env.pop("RAY_ADDRESS", None)
    env["RAY_AUTH_MODE"] = "token"
    return env


class RayNodes:
    """Ray nodes started with ``ray start --block``, each in its own session so one can be killed alone."""

    def __init__(self, root) -> None:
        self.root = root
        self.port = 0  # the head's GCS port, claimed when it starts
        self.address = ""
        self.procs: dict[str, subprocess.Popen] = {}

    def _start(self, name: str, args: list[str]) -> None:
        log = open(os.path.join(self.root, f"ray_{name}.log"), "wb")  # a second try starts a fresh log
        self.procs[name] = subprocess.Popen(
            [
                RAY,
                "start",
                "--block",
                "--disable-usage-stats",
                "--node-ip-address=127.0.0.1",
                *args,
                *node_port_args(head="--head" in args),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env=ray_env(),
        )

    #: What ``ray start`` prints once its node registered with the cluster (then ``--block`` blocks).
    STARTED = b"Ray runtime started"
    #: Ray's own start-up deadline (30 s for the raylet to register, hard-coded in ray/_private/node.py)
    #: can pass on a two-core machine under a full test suite: such a start is tried again, as the
    #: provider's own starts are (hooks/ray_in_process.py).
    TIMED_OUT = ray_in_process.STARTUP_TIMED_OUT.encode()

    def _start_node(self, name: str, args_of) -> None:
        """Start node ``name`` with ``args_of()`` (called again for a second try: fresh ports) and wait
        until it says it started; a start Ray itself gave up on under load is tried again."""
        attempts = ray_in_process.START_ATTEMPTS
        for attempt in range(1, attempts + 1):
            self._start(name, args_of())
            deadline = time.time() + 180
            while time.time() < deadline:
                log = self._log_bytes(name)
                if self.STARTED in log:
                    return
                if self.procs[name].poll() is not None:
                    break
                time.sleep(0.3)
            failed_in_startup = self.TIMED_OUT in self._log_bytes(name)
            self.kill(name)
            if not (failed_in_startup and attempt < attempts):
                raise AssertionError(f"ray node {name} did not start:\n" + self.log(name))

    def start_head(self) -> None:
        def args() -> list[str]:
            self.port = free_port()
            self.address = f"127.0.0.1:{self.port}"
            return ["--head", f"--port={self.port}", "--num-cpus=0", "--include-dashboard=false"]

        self._start_node("head", args)

    def start_worker(self, name: str, cpus: int = 2) -> None:
        self._start_node(name, lambda: [f"--address={self.address}", f"--num-cpus={cpus}"])
        self.wait_for_cpus(cpus, name)

    def cluster_cpus(self) -> float:
        try:
            out = subprocess.run(
                [RAY, "status", f"--address={self.address}"], capture_output=True, text=True, timeout=60, env=ray_env()
            )
        except subprocess.TimeoutExpired:
            return 0.0  # a slow answer on a loaded machine: wait_for_cpus asks again until its deadline
        for line in out.stdout.splitlines():
            # e.g. " 0.0/2.0 CPU"
            if line.strip().endswith(" CPU") and "/" in line:
                return float(line.split("/")[1].split()[0])
        return 0.0

    def wait_for_cpus(self, cpus: float, worker: str, timeout: float = 120) -> None:
        deadline = time.time() + timeout
        while self.cluster_cpus() < cpus:
            assert time.time() < deadline, (
                f"the cluster never reached {cpus} CPUs\nhead:\n{self.log('head')}\n{worker}:\n{self.log(worker)}"
            )
            time.sleep(1)

    def kill(self, name: str) -> None:
        proc = self.procs.pop(name)
        kill_session(proc.pid)
        proc.wait(timeout=30)

    def log(self, name: str) -> str:
        return self._log_bytes(name).decode(errors="replace")[-3000:]

    def _log_bytes(self, name: str) -> bytes:
        try:
            with open(os.path.join(self.root, f"ray_{name}.log"), "rb") as fh:
                return fh.read()
        except FileNotFoundError:
            return b""

    def stop_all(self) -> None:
        for name in list(self.procs):
            try:
                os.killpg(self.procs[name].pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        time.sleep(1)
        for name in list(self.procs):
            self.kill(name)


@pytest.fixture
def nodes(tmp_path):
    n = RayNodes(str(tmp_path))
    n.start_head()
    try:
        yield n
    finally:
        n.stop_all()


def _write_recipe(tmp_path, corpus, name: str) -> str:
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        RECIPE.format(
            name=name,
            data=corpus,
            export=tmp_path / f"{name}_out.jsonl",
            work=tmp_path / "work",
            parts=4,
            strategy="every_op",
        )
    )
    return str(path)


def test_worker_node_killed_mid_job_resumes_from_checkpoints(nodes, tmp_path, corpus, airflow_home):
    # Reference: the same recipe on the embedded single-node Ray.
    ref = _write_recipe(tmp_path, corpus, "multinode_ref")
    run = run_cli(["run", ref, "--job-id", "ref"], str(tmp_path / "ref.log"))
    assert run.rc == 0, tail(run.output)
    ref_export = (tmp_path / "multinode_ref_out.jsonl").read_bytes()

    nodes.start_worker("worker1")
    recipe = _write_recipe(tmp_path, corpus, "multinode")
    job_dir = str(tmp_path / "work" / "cluster")
    # Each partition holds after op 1 is committed until the test has killed the node, so the kill
    # lands mid-job with some checkpoints on disk and some work in flight, however slow the machine.
    release = os.path.join(job_dir, "_test_release")
    write_faults(
        job_dir,
        [
            {
                "point": "after_op",
                "op_index": 1,
                "kind": "delay",
                "seconds": 600,
                "until": os.path.basename(release),
                "times": 1000,
            }
        ],
    )
    env = ray_env()
    env.update(
        {
            "AIRFLOW_CONN_RAY_DEFAULT": json.dumps({"conn_type": "ray", "host": "127.0.0.1", "port": nodes.port}),
            "DJ_TASK_RETRIES": "3",
            "DJ_TASK_RETRY_DELAY_S": "1",
            # the deduplicator's global step in key shards, its tasks on the worker node (the reference
            # ran it in one process)
            "DJ_GLOBAL_STEP_SHARDS": "3",
        }
    )
    log_path = tmp_path / "cluster.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [DJ_AIRFLOW, "run", recipe, "--job-id", "cluster"],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
    try:
        deadline = time.time() + 180
        while not [e for e in read_events(job_dir, "checkpoint_save") if e.get("op_index") == 1]:
            assert proc.poll() is None and time.time() < deadline, tail(log_path.read_text(errors="replace"))
            time.sleep(0.2)
        killed_at = time.time()
        nodes.kill("worker1")  # the node goes away with the work in flight on it
        nodes.start_worker("worker2")
        with open(release, "w") as fh:
            fh.write("go")
        rc = proc.wait(timeout=300)
    finally:
        kill_session(proc.pid)
    output = log_path.read_text(errors="replace")
    assert rc == 0, tail(output)

    assert_same_bytes((tmp_path / "multinode_out.jsonl").read_bytes(), ref_export)
    events = read_events(job_dir)
    loads = [e for e in events if e["event_type"] == "checkpoint_load" and e["timestamp"] > killed_at]
    assert loads, "the retry after the node loss did not resume from a checkpoint"
    # No op whose checkpoint was committed before the kill ran again afterwards.
    committed = {
        (e["partition_id"], e["op_index"])
        for e in events
        if e["event_type"] == "checkpoint_save" and e["timestamp"] < killed_at
    }
    assert committed
    rerun = [
        (e["partition_id"], e["op_index"])
        for e in events
        if e["event_type"] == "op_start"
        and e["timestamp"] > killed_at
        and (e.get("partition_id"), e.get("op_index")) in committed
    ]
    assert not rerun, f"committed work ran again after the node loss: {rerun}"
    with open(os.path.join(job_dir, "job_summary.json")) as fh:
        assert json.load(fh)["export"]["rows"] == ref_export.count(b"\n")
    assert "connecting to Ray cluster at 127.0.0.1" in output
    # planning on the cluster: the 4 partitions' hashes (the index is one chunk) as Ray tasks
    assert "planning: 4 tasks on the Ray cluster" in output, tail(output)
    with open(os.path.join(job_dir, "checkpoints", "partitioning_info.json")) as fh:
        assert json.load(fh)["timing"]["tasks"] == {"index": 1, "hash": 4}
    (shards,) = [e for e in events if e["event_type"] == "global_op_shards"]
    assert shards["key_shards"] == 3
