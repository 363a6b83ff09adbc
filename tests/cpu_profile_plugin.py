"""CPU seconds per test module, every descendant process included: a diagnostic, off unless named.

    bash scripts/test.sh tests/unit tests/conformance tests/integration tests/e2e tests/dj_recipes \
        -p tests.cpu_profile_plugin

Each pytest process (each xdist worker) moves itself into a cgroup of its own under the cgroup v1
``cpuacct`` hierarchy (root only), so the servers, Ray processes and subprocesses a module starts are
counted with it, wherever their session.  One JSON line per module (CPU and wall seconds) goes to
``$DJ_CPU_PROFILE_DIR`` (default ``/tmp/dj-cpu-profile``), one file per worker.  Caveat: a process that
outlives its module (a Ray head shared by later modules) charges its CPU to the worker that started it,
and so to whatever module runs there next.  docs/e2e_testing.md, "What the suite's modules cost".
"""

from __future__ import annotations

import json
import os
import time

import pytest

CPUACCT = "/sys/fs/cgroup/cpuacct"
_state: dict = {}


def _usage() -> float:
    with open(os.path.join(CPUACCT, _state["group"], "cpuacct.usage")) as fh:
        return int(fh.read()) / 1e9


def pytest_configure(config) -> None:
    if not os.path.isdir(CPUACCT):
        raise pytest.UsageError(f"tests.cpu_profile_plugin needs the cgroup v1 cpuacct hierarchy at {CPUACCT}")
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    _state["group"] = f"dj_cpu_profile_{worker}_{os.getpid()}"
    os.makedirs(os.path.join(CPUACCT, _state["group"]), exist_ok=True)
    with open(os.path.join(CPUACCT, _state["group"], "cgroup.procs"), "w") as fh:
        fh.write(str(os.getpid()))
    out = os.environ.get("DJ_CPU_PROFILE_DIR", "/tmp/dj-cpu-profile")
    os.makedirs(out, exist_ok=True)
    _state.update(out=os.path.join(out, f"{worker}.jsonl"), module=None)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    module = item.nodeid.split("::")[0]
    if _state["module"] != module:
        _state.update(module=module, cpu=_usage(), wall=time.monotonic())
    yield
    if nextitem is None or nextitem.nodeid.split("::")[0] != module:  # its module fixtures are torn down
        line = {"module": module, "cpu_s": round(_usage() - _state["cpu"], 1)}
        line["wall_s"] = round(time.monotonic() - _state["wall"], 1)
        with open(_state["out"], "a") as fh:
            fh.write(json.dumps(line) + "\n")
        _state["module"] = None
