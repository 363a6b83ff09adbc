"""A Ray cluster separate from the test process, serving Ray Jobs on loopback: for Ray Jobs mode's tests.

``ray start --head --block`` in its own session, with its dashboard on a free loopback port, a free
GCS port and a private temp dir, so it shares nothing with the suite's other clusters; it is ended
by its own process group (``ray stop`` would end every Ray of the machine).  Its PATH starts with this
virtualenv's bin, so a Ray Job's ``python`` is the one with this package installed, as the cluster's
image would provide it.

``worker_resources`` adds worker nodes (``ray start --address``), one per entry, each with one CPU and
that entry's custom resources (``{"node_b": 1}``), so every node is a distinct, nameable member of the
cluster: a multi-node cluster on one machine.  Each is a session of its own, ended by its process
group; they take the head's session dir (a worker node is given no temp dir of its own), so the
head's stray search finds their processes too.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

from airflow_provider_dj.hooks.ray_in_process import START_ATTEMPTS, STARTUP_TIMED_OUT
from tests.ports import free_port

RAY = os.path.join(os.path.dirname(sys.executable), "ray")


def node_port_args(head: bool) -> list[str]:
    """``ray start`` flags for the ports a node would otherwise take at fixed defaults or from the
    ephemeral range, shared with every other node and cluster on this machine: claimed ones instead."""
    args = [
        f"--dashboard-agent-listen-port={free_port()}",
        f"--dashboard-agent-grpc-port={free_port()}",
        f"--metrics-export-port={free_port()}",
        f"--runtime-env-agent-port={free_port()}",
        f"--node-manager-port={free_port()}",
        f"--object-manager-port={free_port()}",
    ]
    return [f"--ray-client-server-port={free_port()}", *args] if head else args


def cluster_env() -> dict:
    """The head's environment: token auth as the suite's other clusters use it, this venv first on PATH."""
    env = dict(os.environ)
    env.pop("RAY_ADDRESS", None)
    env["RAY_AUTH_MODE"] = "token"
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    return env


#: What ``ray start`` prints once its node registered with the cluster (then ``--block`` blocks).
NODE_STARTED = b"Ray runtime started"


def spawn_node(cmd: list[str], log_path: str) -> subprocess.Popen:
    """``ray start ... --block`` in a session of its own (ended by its process group), its output to
    ``log_path`` (written anew), with :func:`cluster_env`."""
    with open(log_path, "wb") as log:
        return subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env=cluster_env(),
        )


class RayJobsCluster:
    """One head node with ``num_cpus`` CPUs and its dashboard, and a worker node with one CPU per entry
    of ``worker_resources`` (its custom resources); ``address`` is the dashboard's URL."""

    def __init__(self, num_cpus: int = 2, worker_resources: list[dict[str, float]] | tuple = ()) -> None:
        # Short: Ray's unix socket paths under the temp dir must stay under 107 bytes.
        self.temp_dir = tempfile.mkdtemp(prefix="djrj-", dir="/tmp")
        self.gcs_port, self.dashboard_port = free_port(), free_port()
        self.address = f"http://127.0.0.1:{self.dashboard_port}"
        self.gcs_address = f"127.0.0.1:{self.gcs_port}"
        self.log_path = os.path.join(self.temp_dir, "head.log")
        self.num_cpus = num_cpus
        self.worker_resources = [dict(r) for r in worker_resources]
        self.proc: subprocess.Popen | None = None
        self.workers: list[subprocess.Popen] = []

    def start(self, timeout: float = 120) -> RayJobsCluster:
        """Start the head and wait until its job agent runs a job.  A start that Ray itself gave up on
        (its fixed 30 s raylet wait, which a loaded two-core machine can outrun) is tried again on
        fresh ports, as the provider's own starts are (hooks/ray_in_process.py)."""
        for attempt in range(1, START_ATTEMPTS + 1):
            if attempt > 1:
                self.gcs_port, self.dashboard_port = free_port(), free_port()
                self.address = f"http://127.0.0.1:{self.dashboard_port}"
                self.gcs_address = f"127.0.0.1:{self.gcs_port}"
            self._launch()
            deadline = time.time() + timeout
            try:
                while not self._answers():
                    if self.proc.poll() is not None or time.time() > deadline:
                        raise RuntimeError(f"the Ray head with its dashboard did not start:\n{self.log()}")
                    time.sleep(0.5)
                self._warm_up(deadline)
                break
            except BaseException:
                timed_out = self.proc.poll() is not None and STARTUP_TIMED_OUT in self.log()
                self._end_group()
                if not timed_out or attempt == START_ATTEMPTS:
                    self.stop()
                    raise
        try:
            for index in range(len(self.worker_resources)):
                self._start_worker(index, timeout)
            self._wait_for_nodes(1 + len(self.worker_resources), time.time() + timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _worker_log_path(self, index: int) -> str:
        return os.path.join(self.temp_dir, f"worker{index}.log")

    def _start_worker(self, index: int, timeout: float) -> None:
        """Start worker node ``index`` and wait until it says it joined; a start Ray itself gave up on
        under load (its 30 s raylet wait) is tried again on fresh ports, as the head's is."""
        for attempt in range(1, START_ATTEMPTS + 1):
            cmd = [
                RAY,
                "start",
                "--block",
                "--disable-usage-stats",
                "--node-ip-address=127.0.0.1",
                f"--address={self.gcs_address}",
                "--num-cpus=1",
                f"--resources={json.dumps(self.worker_resources[index], separators=(',', ':'))}",
                *node_port_args(head=False),
            ]
            proc = spawn_node(cmd, self._worker_log_path(index))  # a second try starts a fresh log
            self.workers.append(proc)
            deadline = time.time() + timeout
            while NODE_STARTED not in self._read(self._worker_log_path(index)).encode():
                if proc.poll() is not None or time.time() > deadline:
                    break
                time.sleep(0.3)
            else:
                return
            output = self._read(self._worker_log_path(index))
            self.workers.remove(proc)
            _end_group(proc)
            if STARTUP_TIMED_OUT not in output or attempt == START_ATTEMPTS:
                raise RuntimeError(f"Ray worker node {index} did not join {self.gcs_address}:\n{output}")

    def _wait_for_nodes(self, count: int, deadline: float) -> None:
        """Until the head's state API lists ``count`` alive nodes (a worker's "started" line comes
        as its raylet registers, before the cluster's view of it may have caught up)."""
        from ray.util.state import list_nodes

        alive: list = []
        while time.time() < deadline:
            try:
                alive = [n for n in list_nodes(address=self.address) if n.state == "ALIVE"]
            except Exception:  # noqa: BLE001 - a busy dashboard's timeout: ask again until the deadline
                alive = []
            if len(alive) >= count:
                return
            time.sleep(0.5)
        raise RuntimeError(f"the cluster never listed {count} alive nodes (last: {alive}):\n{self.log()}")

    def node_ids(self) -> dict[str, str]:
        """Each alive node's id -> its name: ``head``, or the custom resource it was started with."""
        from ray.util.state import list_nodes

        names = {}
        for node in list_nodes(address=self.address, detail=True):
            if node.state != "ALIVE":
                continue
            own = [r for r in node.resources_total if any(r in w for w in self.worker_resources)]
            names[node.node_id] = own[0] if own else "head"
        return names

    def _launch(self) -> None:
        cmd = [
            RAY,
            "start",
            "--head",
            "--block",
            "--disable-usage-stats",
            "--node-ip-address=127.0.0.1",
            f"--port={self.gcs_port}",
            "--include-dashboard=true",
            "--dashboard-host=127.0.0.1",
            f"--dashboard-port={self.dashboard_port}",
            f"--num-cpus={self.num_cpus}",
            f"--temp-dir={self.temp_dir}",
            *node_port_args(head=True),
        ]
        self.proc = spawn_node(cmd, self.log_path)

    def _warm_up(self, deadline: float) -> None:
        """Submit one trivial job until the head's job agent takes it, and wait for its end: the
        dashboard answers before its agent can start drivers ("No available agent")."""
        from ray.job_submission import JobSubmissionClient

        client = JobSubmissionClient(self.address)
        while True:
            try:
                sid = client.submit_job(entrypoint="python -c pass", submission_id="warm-up", entrypoint_num_cpus=0)
                break
            except RuntimeError as exc:
                if "No available agent" not in str(exc) or time.time() > deadline:
                    raise
                time.sleep(0.5)
        while str(client.get_job_status(sid).value) not in ("SUCCEEDED", "FAILED", "STOPPED"):
            assert time.time() < deadline, self.log()
            time.sleep(0.3)
        assert str(client.get_job_status(sid).value) == "SUCCEEDED", client.get_job_logs(sid)

    def _answers(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.address}/api/version", timeout=2):
                return True
        except urllib.error.HTTPError:
            return True  # it answers (token auth refuses an unauthenticated request)
        except OSError:
            return False

    def log(self) -> str:
        """The head's log tail, then each worker node's."""
        tails = [self._read(self.log_path)[-4000:]]
        tails += [
            f"--- worker node {i}:\n{self._read(self._worker_log_path(i))[-2000:]}"
            for i in range(len(self.worker_resources))
        ]
        return "\n".join(tails)

    @staticmethod
    def _read(path: str) -> str:
        try:
            with open(path, errors="replace") as fh:
                return fh.read()
        except OSError:
            return ""

    def stop(self, grace: float = 5) -> None:
        """End each worker node's process group, then the head's (raylet, GCS, dashboard, workers),
        then any process of this cluster that left its group (a job's driver runs in its own session),
        found by the cluster's temp dir, which goes with its session logs."""
        workers, self.workers = self.workers, []
        for proc in workers:
            _end_group(proc, grace)
        self._end_group(grace)
        for pid in self._strays():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(self.temp_dir, ignore_errors=True)

    def _end_group(self, grace: float = 5) -> None:
        """The head's process group, ended by :func:`_end_group`."""
        proc, self.proc = self.proc, None
        if proc is not None:
            _end_group(proc, grace)

    def _strays(self) -> list[int]:
        out = []
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                with open(f"/proc/{name}/cmdline", "rb") as fh:
                    if self.temp_dir.encode() in fh.read():
                        out.append(int(name))
            except OSError:
                continue
        return out


def _end_group(proc: subprocess.Popen, grace: float = 5) -> None:
    """SIGTERM to a node's process group, and SIGKILL after ``grace`` seconds (a draining node waits
    30 s otherwise)."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 30)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        deadline = time.time() + wait
        while time.time() < deadline and _group_alive(proc.pid):
            time.sleep(0.2)
    proc.wait(timeout=30)


def _group_alive(pgid: int) -> bool:
    """Whether a process of group ``pgid`` still runs (zombies, dead and waiting to be reaped, do not)."""
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False
