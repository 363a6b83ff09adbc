"""Run a command and measure its wall time and the peak memory of its whole process tree.

Two memory figures are taken, because one process is not the whole story for
either system (Ray starts a GCS server, a raylet and worker processes;
Data-Juicer's default executor forks ``np`` workers):

* ``peak_tree_rss`` — psutil polling of the command and all its descendants,
  RSS summed per sample; the figure is the largest sum seen.  Shared pages
  (Python libraries, Ray's plasma store in /dev/shm) are counted once per
  process that maps them, so this over-states real use.
* ``peak_tree_pss`` — the same with PSS (shared pages split between the
  processes sharing them); the closer figure for "RAM the job needed".
* ``max_single_rss`` — GNU ``/usr/bin/time -v``'s "Maximum resident set
  size" when /usr/bin/time exists: the largest single process (it is *not* a
  sum over the tree).

Polling every ``interval`` s can miss a spike shorter than that.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import asdict, dataclass, field

import psutil

GNU_TIME = "/usr/bin/time"


@dataclass
class RunResult:
    cmd: list[str]
    rc: int | None
    wall_s: float
    timed_out: bool
    peak_tree_rss: int  # bytes
    peak_tree_pss: int  # bytes (0 when PSS could not be read)
    peak_nprocs: int
    max_single_rss: int | None  # bytes, from /usr/bin/time -v
    log_path: str
    samples: int = 0
    cpu_tree_s: float = 0.0  # CPU seconds used by the tree (sampled; a process's last ~interval can be missed)
    cpu_machine_busy_s: float = 0.0  # CPU seconds the whole machine was busy meanwhile
    foreign_cpu_s: float = 0.0  # busy time not ours: other users' load during the run
    loadavg_before: float | None = None
    error: str | None = None
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


def _gnu_time_available() -> bool:
    if not os.path.exists(GNU_TIME):
        return False
    try:
        out = subprocess.run([GNU_TIME, "-v", "true"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return False
    return "Maximum resident set size" in out.stderr


_HAS_GNU_TIME: bool | None = None


def has_gnu_time() -> bool:
    global _HAS_GNU_TIME
    if _HAS_GNU_TIME is None:
        _HAS_GNU_TIME = _gnu_time_available()
    return _HAS_GNU_TIME


class _TreeSampler(threading.Thread):
    def __init__(self, root_pid: int, interval: float) -> None:
        super().__init__(daemon=True)
        self.root_pid = root_pid
        self.interval = interval
        self.stop_event = threading.Event()
        self.peak_rss = 0
        self.peak_pss = 0
        self.peak_nprocs = 0
        self.samples = 0
        self.seen_pids: set[int] = set()
        self.cpu_by_pid: dict[int, float] = {}

    def _procs(self) -> list[psutil.Process]:
        try:
            root = psutil.Process(self.root_pid)
            return [root] + root.children(recursive=True)
        except psutil.Error:
            return []

    def run(self) -> None:
        while not self.stop_event.is_set():
            procs = self._procs()
            rss = pss = 0
            for p in procs:
                try:
                    try:
                        mi = p.memory_full_info()
                        rss += mi.rss
                        pss += getattr(mi, "pss", 0)
                    except psutil.AccessDenied:
                        rss += p.memory_info().rss
                    self.seen_pids.add(p.pid)
                    ct = p.cpu_times()
                    self.cpu_by_pid[p.pid] = ct.user + ct.system
                except psutil.Error:
                    continue  # exited between listing and reading
            if procs:
                self.samples += 1
                self.peak_rss = max(self.peak_rss, rss)
                self.peak_pss = max(self.peak_pss, pss)
                self.peak_nprocs = max(self.peak_nprocs, len(procs))
            self.stop_event.wait(self.interval)


def _kill_tree(proc: subprocess.Popen) -> None:
    """Kill the process group we started, then any descendant that left it (Ray daemons)."""
    try:
        descendants = psutil.Process(proc.pid).children(recursive=True)
    except psutil.Error:
        descendants = []
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    # Only processes that were descendants of the command we started.
    for p in descendants:
        try:
            if p.is_running():
                p.kill()
        except psutil.Error:
            pass


def set_autogroup_nice(pid: int, nice: int) -> str | None:
    """Give the session led by ``pid`` (its own autogroup) the nice value ``nice``; None, or why not.

    With CONFIG_SCHED_AUTOGROUP every session is scheduled as one group, and a
    process's own nice value only counts inside its group: the group's nice is
    what competes with other users' sessions.
    """
    path = f"/proc/{pid}/autogroup"
    if not os.path.exists(path):
        return "no autogroup scheduling here (the process nice value applies)"
    try:
        with open(path, "w") as fh:
            fh.write(str(nice))
    except OSError as exc:
        return f"could not set the autogroup nice: {exc}"
    return None


def run_measured(
    cmd: list[str],
    *,
    env: dict,
    log_path: str,
    timeout_s: float,
    cwd: str | None = None,
    interval: float = 0.25,
    nice: int = 0,
) -> RunResult:
    """Run ``cmd`` (stdout+stderr to ``log_path``), return wall time and peak memory.

    ``nice``: scheduling priority for the run's session (see set_autogroup_nice).
    """
    os.makedirs(os.path.dirname(os.path.abspath(log_path)), exist_ok=True)
    time_file = log_path + ".time"
    full_cmd = list(cmd)
    if has_gnu_time():
        full_cmd = [GNU_TIME, "-v", "-o", time_file] + full_cmd
    if shutil.which(full_cmd[0]) is None and not os.path.exists(full_cmd[0]):
        return RunResult(cmd, None, 0.0, False, 0, 0, 0, None, log_path, error=f"executable not found: {full_cmd[0]}")

    def busy() -> float:
        ct = psutil.cpu_times()
        return (
            sum(ct) - ct.idle - getattr(ct, "iowait", 0.0) - getattr(ct, "guest", 0.0) - getattr(ct, "guest_nice", 0.0)
        )

    load_before = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    me = psutil.Process()
    me0 = sum(me.cpu_times()[:2])
    with open(log_path, "w") as log:
        busy0 = busy()
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            full_cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=cwd, start_new_session=True
        )
        nice_problem = set_autogroup_nice(proc.pid, nice) if nice else None
        sampler = _TreeSampler(proc.pid, interval)
        sampler.start()
        timed_out = False
        try:
            rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_tree(proc)
            rc = proc.returncode
        wall = time.perf_counter() - t0
        busy1 = busy()
        sampler.stop_event.set()
        me1 = sum(me.cpu_times()[:2])
        sampler.join(timeout=5)
    max_single = None
    if os.path.exists(time_file):
        with open(time_file) as fh:
            text = fh.read()
        m = re.search(r"Maximum resident set size \(kbytes\):\s*(\d+)", text)
        if m:
            max_single = int(m.group(1)) * 1024
    result = RunResult(
        cmd=cmd,
        rc=rc,
        wall_s=wall,
        timed_out=timed_out,
        peak_tree_rss=sampler.peak_rss,
        peak_tree_pss=sampler.peak_pss,
        peak_nprocs=sampler.peak_nprocs,
        max_single_rss=max_single,
        log_path=log_path,
        samples=sampler.samples,
        cpu_tree_s=sum(sampler.cpu_by_pid.values()),
        cpu_machine_busy_s=busy1 - busy0,
        # Minus this process too (the poller): what is left is other users' load.
        foreign_cpu_s=max(0.0, (busy1 - busy0) - sum(sampler.cpu_by_pid.values()) - (me1 - me0)),
        loadavg_before=load_before,
        error=(f"timed out after {timeout_s:.0f}s" if timed_out else (None if rc == 0 else f"exit status {rc}")),
    )
    if nice:
        result.extra["nice"] = nice
        if nice_problem:
            result.extra["nice_problem"] = nice_problem
    return result


def tail(path: str, n: int = 25) -> str:
    try:
        with open(path, errors="replace") as fh:
            lines = fh.readlines()
    except OSError:
        return ""
    return "".join(lines[-n:])


def wait_for_quiet(max_wait_s: float, threshold_cores: float, window_s: float = 3.0) -> dict:
    """Wait (up to ``max_wait_s``) until other processes use less than ``threshold_cores`` CPUs.

    Called between runs, when this benchmark itself is idle, so the machine's
    busy CPU is other users' load.  Returns what was seen; never raises.
    """
    ncpu = psutil.cpu_count() or 1
    t0 = time.perf_counter()
    load = None
    while True:
        load = psutil.cpu_percent(interval=window_s) / 100.0 * ncpu
        waited = time.perf_counter() - t0
        if load < threshold_cores or waited >= max_wait_s:
            return {"waited_s": round(waited, 1), "other_load_cores": round(load, 2), "quiet": load < threshold_cores}
