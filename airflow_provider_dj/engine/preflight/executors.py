"""Where probe units run: a Ray task holding one GPU, a spawned subprocess, or inline.

Why three: the Airflow path dispatches through Ray like the rest of the
DAG (``ray.remote(num_gpus=1)`` when the cluster has GPUs, ``num_cpus=1``
otherwise); a GPU box without Ray (``scripts/gpu_check.sh``) runs each
unit in a *spawned* subprocess, which a timeout can kill and whose exit
returns all device memory; ``inline`` runs in this process (debugging,
tests of op failures) and cannot stop a stuck op, only report it.

The driver loop wakes every ``poll_s``, enforces ``timeout_s`` per unit
(naming the ops of a stuck probe), and every ``heartbeat_s`` (30 s) logs
which probes are still alive.  Ray is imported lazily, only on that path.

How many units run at once (``concurrency_limit``): at most
``max_concurrent_gpu_probes``, and, as in Data-Juicer's preflight, each
probe holds a whole GPU: on a CUDA device the subprocess path runs at most
one probe per visible GPU, each pinned to its own device through
``CUDA_VISIBLE_DEVICES`` (Ray gets the same from ``num_gpus=1``).  Two
probes sharing a device would each count the other's allocations in their
device-wide memory figure.  ``inline`` runs one unit at a time: threads
share one process, so one probe's RSS or allocator peak would include
another's.
"""

from __future__ import annotations

import logging
import os
import pickle
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from airflow_provider_dj.engine.preflight.probe import ProbeFailure, run_probe_unit

log = logging.getLogger(__name__)

EXECUTORS = ("auto", "ray", "local", "inline")


@dataclass
class _Running:
    spec: dict
    label: str
    started: float
    handle: Any = None  # ray ObjectRef | (Process, Connection) | (Thread, holder)


def _label(spec: dict) -> str:
    return ", ".join(f"{spec['ops'][str(i)]['name']} (process[{i}])" for i in spec["unit"]["targets"])


def resolve_executor(name: str) -> str:
    if name not in EXECUTORS:
        raise ValueError(f"probe_executor must be one of {', '.join(EXECUTORS)}, got {name!r}")
    if name != "auto":
        return name
    # find_spec, not import: importing ray here would fix its auth mode
    # before RayHook sets RAY_AUTH_MODE, and the in-process cluster the hook
    # then starts would refuse its own driver (InvalidAuthToken).
    import importlib.util

    return "ray" if importlib.util.find_spec("ray") is not None else "local"


class _Backend:
    def submit(self, spec: dict) -> Any: ...
    def poll(self, handle: Any) -> dict | None: ...
    def kill(self, handle: Any) -> None: ...


class _InlineBackend(_Backend):
    def submit(self, spec):
        holder: dict = {}
        t = threading.Thread(
            target=lambda: holder.setdefault("out", run_probe_unit(spec)), daemon=True, name="gpu-probe"
        )
        t.start()
        return (t, holder)

    def poll(self, handle):
        t, holder = handle
        return holder.get("out") if not t.is_alive() else None

    def kill(self, handle):  # a thread cannot be stopped; it is abandoned (daemon)
        pass


class _LocalBackend(_Backend):
    """One fresh interpreter per unit (``python -m ...preflight.worker``): the spec goes in on stdin as a
    pickle, the result comes back in a file.  A subprocess rather than ``multiprocessing`` so the
    parent's ``__main__`` (a script, Airflow's task runner) is never re-executed, and nothing forks a
    process that may hold a CUDA context.

    ``devices`` (the GPU ids a probe may hold, one probe each) pins every worker to a device of its
    own while it runs; None on the CPU path."""

    def __init__(self, devices: list[str] | None = None) -> None:
        self.free = list(devices) if devices else None

    def submit(self, spec):
        fd, out_path = tempfile.mkstemp(prefix="dj-gpu-probe-", suffix=".pkl")
        os.close(fd)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)  # op classes unpickle by reference
        device = None
        if spec.get("hide_gpus"):
            env["CUDA_VISIBLE_DEVICES"] = ""
        elif self.free:
            device = self.free.pop(0)
            env["CUDA_VISIBLE_DEVICES"] = device
        proc = subprocess.Popen(
            [sys.executable, "-m", "airflow_provider_dj.engine.preflight.worker", out_path],
            stdin=subprocess.PIPE,
            env=env,
        )
        try:
            proc.stdin.write(pickle.dumps(spec, protocol=pickle.HIGHEST_PROTOCOL))
            proc.stdin.close()
        except BrokenPipeError:
            pass
        return (proc, out_path, device)

    def _release(self, device: str | None) -> None:
        if device is not None and self.free is not None:
            self.free.append(device)

    def poll(self, handle):
        proc, out_path, device = handle
        code = proc.poll()
        if code is None:
            return None
        self._release(device)
        try:
            with open(out_path, "rb") as fh:
                data = fh.read()
            if code == 0 and data:
                return pickle.loads(data)
        finally:
            try:
                os.remove(out_path)
            except OSError:
                pass
        return {
            "results": [],
            "warnings": [],
            "device": {},
            "error": {
                "op_index": None,
                "op_name": None,
                "kind": "oom" if code in (-9, 137) else "error",
                "message": f"probe worker exited with code {code} without a result "
                f"(killed for memory, or crashed in native code; its stderr is in this task's log)",
            },
        }

    def kill(self, handle):
        proc, out_path, device = handle
        self._release(device)
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        try:
            os.remove(out_path)
        except OSError:
            pass


class _RayBackend(_Backend):
    def __init__(self, ray, use_gpu: bool) -> None:
        self.ray = ray
        opts = {"num_gpus": 1, "num_cpus": 1} if use_gpu else {"num_cpus": 1}
        # max_calls=1: a fresh worker per probe, so model init is really measured (no model cached
        # from an earlier task in a reused worker) and its device memory is returned on exit.
        self.remote = ray.remote(max_retries=0, max_calls=1, **opts)(run_probe_unit)

    def submit(self, spec):
        return self.remote.remote(spec)

    def poll(self, handle):
        ready, _ = self.ray.wait([handle], timeout=0)
        if not ready:
            return None
        try:
            return self.ray.get(handle)
        except Exception as exc:  # noqa: BLE001 - worker died (OOM killer, node loss)
            return {
                "results": [],
                "warnings": [],
                "device": {},
                "error": {
                    "op_index": None,
                    "op_name": None,
                    "kind": "oom" if "memory" in str(exc).lower() else "error",
                    "message": f"probe worker failed: {type(exc).__name__}: {str(exc)[:1000]}",
                },
            }

    def kill(self, handle):
        try:
            self.ray.cancel(handle, force=True)
        except Exception:  # noqa: BLE001
            pass


def get_ray(ray_client: Callable[[], Any] | None = None):
    if ray_client is not None:
        return ray_client()
    # The operator passes its RayHook's client; a script without one gets a local Ray.
    import ray

    if not ray.is_initialized():
        # "local": our own cluster, never a stale one recorded in /tmp/ray by `ray start`.
        ray.init(address="local", include_dashboard=False, configure_logging=False)
    return ray


def gpu_devices(gpu_count: int) -> list[str]:
    """The GPU ids probes may hold: this process's ``CUDA_VISIBLE_DEVICES`` when set, else 0..n-1."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip():
        return [v.strip() for v in visible.split(",") if v.strip()]
    return [str(i) for i in range(gpu_count)]


def concurrency_limit(executor: str, max_concurrent: int, use_gpu: bool, gpu_count: int) -> int:
    """How many probe units may run at once (see the module's docstring for why)."""
    limit = max(1, int(max_concurrent))
    if executor == "inline":
        return 1
    if use_gpu and executor == "local":
        limit = min(limit, max(1, gpu_count))
    return limit


def run_units(
    specs: list[dict],
    *,
    executor: str,
    use_gpu: bool,
    max_concurrent: int = 1,
    gpu_count: int = 0,
    timeout_s: float | None = None,
    heartbeat_s: float = 30.0,
    poll_s: float = 0.2,
    ray_client: Callable[[], Any] | None = None,
    say: Callable[[str], None] | None = None,
) -> list[dict]:
    """Run every unit (at most ``concurrency_limit(...)`` at once); returns their outputs in submission
    order.

    A unit past ``timeout_s`` is stopped and turned into a ``timeout`` error naming its ops.
    """
    say = say or log.info
    limit = concurrency_limit(executor, max_concurrent, use_gpu, gpu_count)
    if len(specs) > 1:
        say(
            f"GPU probes: {len(specs)} unit(s), at most {limit} at once "
            f"(max_concurrent_gpu_probes={max_concurrent}, executor {executor}"
            + (f", {gpu_count} GPU(s), one probe per GPU" if use_gpu else "")
            + ")"
        )
    if executor == "ray":
        backend: _Backend = _RayBackend(get_ray(ray_client), use_gpu)
    elif executor == "local":
        backend = _LocalBackend(gpu_devices(gpu_count)[:limit] if use_gpu else None)
    elif executor == "inline":
        backend = _InlineBackend()
    else:
        raise ValueError(f"unknown executor {executor!r}")
    queue = list(enumerate(specs))
    running: dict[int, _Running] = {}
    outputs: dict[int, dict] = {}
    last_beat = time.monotonic()
    try:
        while queue or running:
            while queue and len(running) < limit:
                i, spec = queue.pop(0)
                r = _Running(spec, _label(spec), time.monotonic())
                r.handle = backend.submit(spec)
                running[i] = r
                say(f"GPU probe started: {r.label} ({executor})")
            for i, r in list(running.items()):
                out = backend.poll(r.handle)
                if out is not None:
                    outputs[i] = out
                    del running[i]
                    continue
                if timeout_s is not None and time.monotonic() - r.started > timeout_s:
                    backend.kill(r.handle)
                    outputs[i] = {
                        "results": [],
                        "warnings": [],
                        "device": {},
                        "error": ProbeFailure(
                            r.spec["unit"]["targets"][0],
                            r.label,
                            "timeout",
                            f"GPU probe of {r.label} did not finish within gpu_probe_timeout_seconds={timeout_s:g}; "
                            f"raise the timeout or check the op (model download? stuck device?)",
                        ).to_dict(),
                    }
                    del running[i]
            now = time.monotonic()
            if running and now - last_beat >= heartbeat_s:
                last_beat = now
                alive = "; ".join(f"{r.label} for {now - r.started:.0f}s" for r in running.values())
                say(f"GPU probes still running: {alive}")
            if running:
                time.sleep(poll_s)
    finally:
        for r in running.values():
            backend.kill(r.handle)
    return [outputs[i] for i in range(len(specs))]
