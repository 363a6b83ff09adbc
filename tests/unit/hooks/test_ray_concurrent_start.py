"""Several runs starting Ray on one machine at once: the token file, the fast exit, the head port.

Real processes and files; Ray itself is not started here (the integration
test tests/integration/test_concurrent_runs.py starts several at once).
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import shutil
import socket
import stat
import subprocess
import sys
import time

import pytest

from airflow_provider_dj.hooks import ray as ray_hook
from airflow_provider_dj.hooks import ray_in_process, ray_local_head


def _make_token(home: str, go_at: float, out) -> None:
    os.environ["HOME"] = home
    os.environ.pop("RAY_AUTH_TOKEN", None)
    os.environ.pop("RAY_AUTH_TOKEN_PATH", None)
    os.environ["RAY_AUTH_MODE"] = "token"
    while time.time() < go_at:
        pass
    path = ray_in_process.ensure_auth_token()
    with open(path) as fh:
        out.put(fh.read())


def test_runs_starting_together_agree_on_one_complete_token(tmp_path):
    ctx = mp.get_context("fork")
    out = ctx.Queue()
    go_at = time.time() + 1.0
    procs = [ctx.Process(target=_make_token, args=(str(tmp_path), go_at, out)) for _ in range(8)]
    for p in procs:
        p.start()
    tokens = {out.get(timeout=60) for _ in procs}
    for p in procs:
        p.join(timeout=60)
    assert len(tokens) == 1
    token = tokens.pop()
    assert len(token) == 64 and int(token, 16) >= 0
    path = tmp_path / ".ray" / "auth_token"
    assert path.read_text() == token
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert sorted(os.listdir(tmp_path / ".ray")) == ["auth_token"]  # no temp file left


def test_no_token_file_when_the_token_comes_from_elsewhere(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("RAY_AUTH_TOKEN", "abc")
    assert ray_in_process.ensure_auth_token() is None
    monkeypatch.delenv("RAY_AUTH_TOKEN")
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    assert ray_in_process.ensure_auth_token() is None
    assert not (tmp_path / ".ray").exists()


KILL_SCRIPT = """
import json, subprocess, sys, time
from airflow_provider_dj.hooks import ray_in_process
# Their output goes nowhere: a child holding this script's stdout pipe would keep the test's
# subprocess.run waiting for the pipe to close until the child's sleep ends.
quiet = dict(stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], **quiet)
detached = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True, **quiet)
time.sleep(0.3)
killed = ray_in_process.kill_children()
print(json.dumps({"killed": killed, "sleeper_rc": sleeper.wait(timeout=10), "detached_pid": detached.pid,
                  "detached_running": detached.poll() is None}))
"""


def test_kill_children_spares_a_child_that_left_our_session():
    """A detached child (own session, as the shared Ray head is started) must outlive the fast exit.

    In a child interpreter: kill_children() in the test process would also
    kill pytest's own helpers.
    """
    import json

    proc = subprocess.run([sys.executable, "-c", KILL_SCRIPT], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    try:
        assert res["killed"] == 1 and res["sleeper_rc"] == -9
        assert res["detached_running"]
    finally:
        try:
            os.kill(res["detached_pid"], 9)
        except ProcessLookupError:
            pass


def test_a_busy_default_head_port_is_not_reused(monkeypatch):
    monkeypatch.delenv("DJ_RAY_HEAD_PORT", raising=False)
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", 26379))
        except OSError:
            pass  # someone else holds it already: equally busy
        else:
            s.listen(1)
        port = ray_local_head._head_port()
        assert port != 26379
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", port))  # and the port chosen is free
    monkeypatch.setenv("DJ_RAY_HEAD_PORT", "31234")
    assert ray_local_head._head_port() == 31234  # an explicit port is always used as given


SHARED_IMPORTS_SCRIPT = """
import json, sys, threading
from airflow_provider_dj.hooks import ray_in_process
before = {m: m in sys.modules for m in ray_in_process._IMPORTED_BY_BOTH}
seen = {}

class NoThread:  # records what is imported when the thread would start; starts nothing (no Ray)
    def __init__(self, target, name, daemon):
        seen.update({m: m in sys.modules for m in ray_in_process._IMPORTED_BY_BOTH})
    def start(self):
        pass

threading.Thread = NoThread
started = ray_in_process.start_in_background(1)
print(json.dumps({"before": before, "at_thread_start": seen, "started": started}))
"""


def test_packages_both_threads_import_are_imported_before_the_ray_thread_starts():
    """CI once lost ``aiohttp`` from sys.modules: Ray's init and Airflow's Execution API imported it at once.

    In a fresh interpreter, so the packages are not imported yet when the
    module is; the thread is replaced (nothing starts Ray here).
    """
    import json

    proc = subprocess.run([sys.executable, "-c", SHARED_IMPORTS_SCRIPT], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    assert res["started"] is True
    assert not res["before"]["aiohttp.web"]  # else this test could not fail
    assert all(res["at_thread_start"].values()), res["at_thread_start"]


#: A stand-in for the ``ray`` command (Ray is not started here): its first start fails the way Ray's
#: own 30 s raylet wait fails under load, the next one listens on ``--port``, runs a process named
#: ``raylet`` (what a live head has) and says it started.
FAKE_RAY = r"""#!{python}
import os, socket, sys, time
tries = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tries")
with open(tries, "a") as fh:
    fh.write(" ".join(sys.argv[1:]) + "\n")
if sum(1 for _ in open(tries)) <= {failures}:
    print("Exception: The current node timed out during startup. This could happen because ...", flush=True)
    sys.exit(1)
port = int(next(a for a in sys.argv if a.startswith("--port=")).split("=")[1])
s = socket.socket(); s.bind(("127.0.0.1", port)); s.listen(8)
import subprocess; subprocess.Popen([os.path.join(os.path.dirname(os.path.abspath(__file__)), "raylet"), "120"])
print("Ray runtime started.", flush=True)
time.sleep(120)
"""


def _fake_ray(tmp_path, monkeypatch, failures: int):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "ray"
    fake.write_text(FAKE_RAY.format(python=sys.executable, failures=failures))
    fake.chmod(0o755)
    (bin_dir / "raylet").symlink_to(shutil.which("sleep"))
    monkeypatch.setattr(ray_local_head, "_ray_binary", lambda: str(fake))
    monkeypatch.setenv("DJ_RAY_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")  # no token file in the test's home
    monkeypatch.delenv("DJ_RAY_HEAD_PORT", raising=False)
    return bin_dir / "tries"


def test_a_head_start_ray_timed_out_is_started_again(tmp_path, monkeypatch):
    tries = _fake_ray(tmp_path, monkeypatch, failures=2)
    address = ray_hook.ensure_local_head(num_cpus=1)
    try:
        starts = tries.read_text().splitlines()
        assert len(starts) == 3 and all("--head" in s and "--num-cpus=1" in s for s in starts)
        assert ray_local_head._head_alive(address)
        record = json.loads((tmp_path / "state" / "ray-head.json").read_text())
        assert record["address"] == address and record["ready"] is True
        assert ray_hook.ensure_local_head(num_cpus=1) == address  # the next task only connects
        assert len(tries.read_text().splitlines()) == 3
    finally:
        assert ray_hook.stop_local_head()


def test_a_head_that_keeps_timing_out_fails_naming_its_log(tmp_path, monkeypatch):
    tries = _fake_ray(tmp_path, monkeypatch, failures=99)
    with pytest.raises(ray_hook.RayConnectionError, match="ray-head.log"):
        ray_hook.ensure_local_head()
    assert len(tries.read_text().splitlines()) == ray_in_process.START_ATTEMPTS
    log_text = (tmp_path / "state" / "ray-head.log").read_text()
    assert log_text.count("timed out during startup") == ray_in_process.START_ATTEMPTS
