"""The job view on a big job: how fast is a 1,000- or 10,000-partition job's page served?

Builds a real job directory (engine in-process, no Airflow, no Ray):
``--partitions`` partitions, segment 0 run on every one, one of them crashed
(so the page has a failed partition, failed samples and trace candidates).
With ``--real N`` only the first N partitions run; every later one gets a copy
of partition 1's files and events under its own id and hash
(bench/_clone_partitions.py), which is how a 10,000-partition job is built in
minutes instead of most of an hour.  Then it times, median of ``--repeat``:

* ``job_progress`` alone: what ``dj-airflow monitor`` computes (the baseline);
* ``job_overview``: the page's data (the baseline plus grid, funnel, throughput);
* the whole HTTP GET of the DAG run's tab through the plugin's FastAPI app
  (auth checked by a stand-in auth manager), HTML bytes included, once cold
  (the first in the process) and then warm (the api-server's event cache holds
  what it parsed: engine/jobdir/event_cache.py).

The cold GET is timed after Airflow is imported and its metadata DB asked once
(timed apart): an api-server has done both before it serves its first request,
and here the look-up of the run's job directory is the tab's first use of them.
``--cold-only`` times just that, for the median of several fresh processes.

Usage::

    .venv/bin/python -m bench job-view --partitions 1000 --rows 20000 --repeat 5
    .venv/bin/python -m bench job-view --partitions 10000 --rows 20000 --real 200 --repeat 3
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time


def build_job(tmp: str, parts: int, rows: int, real: int | None = None) -> str:
    from airflow_provider_dj.engine.config.recipe import load_recipe
    from airflow_provider_dj.engine.execution.segment_runner import run_segment
    from airflow_provider_dj.engine.job.setup import prepare_job
    from airflow_provider_dj.engine.jobdir import lock as job_lock
    from airflow_provider_dj.engine.jobdir.events import EventLog
    from airflow_provider_dj.engine.jobdir.faults import InjectedFault
    from tests.helpers_job_view import crash_fault, view_recipe, write_view_input

    data, _ = write_view_input(os.path.join(tmp, "in.jsonl"), rows)
    rpath = os.path.join(tmp, "r.yaml")
    with open(rpath, "w") as fh:
        fh.write(view_recipe("view_bench", data, os.path.join(tmp, "out.jsonl"), os.path.join(tmp, "work"), parts))
    job_dir = os.path.join(tmp, "work", "big")
    os.makedirs(job_dir)
    real = parts if real is None else max(4, min(real, parts))
    with open(os.path.join(job_dir, "_fault_injection.json"), "w") as fh:
        json.dump(crash_fault(real // 2), fh)
    prepared = prepare_job(load_recipe(rpath), job_id="big", airflow_run_id="run_big")
    EventLog(
        prepared.job_dir, "big", writer="validate", defaults={"airflow_dag_id": "big_dag", "airflow_run_id": "run_big"}
    ).emit("job_start", status="new", partitions=parts)
    for pid in range(real):
        try:
            run_segment(prepared.job_dir, 0, pid, try_number=1)
        except InjectedFault:
            pass
    if real < parts:
        from bench._clone_partitions import clone_partitions

        print(f"cloned partition 1 into {clone_partitions(prepared.job_dir, 1, list(range(real, parts)))}")
    job_lock.release(prepared.job_dir, "run_big")
    return prepared.job_dir


def _load_airflow() -> float:
    """Import Airflow and ask its metadata DB once, as an api-server has before its first request."""
    from airflow_provider_dj.plugins import job_lookup

    t0 = time.perf_counter()
    job_lookup._xcom_job_dir("no_such_dag", "no_such_run")
    return time.perf_counter() - t0


def median_s(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--partitions", type=int, default=1000)
    ap.add_argument("--rows", type=int, default=20000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--real", type=int, help="run only this many partitions; copy partition 1 into the rest")
    ap.add_argument("--keep", help="build the job here and keep it; reuse it when it exists")
    ap.add_argument("--cold-only", action="store_true", help="time only the first GET of a fresh process")
    args = ap.parse_args(argv)
    tmp = args.keep or tempfile.mkdtemp(prefix="dj_view_bench_")
    os.environ["DJ_STATE_DIR"] = os.path.join(tmp, "state")
    os.environ["DJ_WORK_DIR"] = os.path.join(tmp, "work")
    os.environ.setdefault("AIRFLOW_HOME", os.path.join(tmp, "airflow_home"))  # never ~/airflow
    try:
        t0 = time.perf_counter()
        job_dir = os.path.join(tmp, "work", "big")
        if not (args.keep and os.path.isdir(job_dir)):
            os.makedirs(tmp, exist_ok=True)
            job_dir = build_job(tmp, args.partitions, args.rows, args.real)
            print(f"built a {args.partitions}-partition job ({args.rows} rows) in {time.perf_counter() - t0:.1f} s")

        from fastapi.testclient import TestClient

        from airflow_provider_dj.client.monitor.progress import job_progress
        from airflow_provider_dj.plugins import auth, job_data
        from airflow_provider_dj.plugins.app import create_app

        class AllowAll:
            async def get_user_from_token(self, token):
                return object()

            def is_authorized_dag(self, **_kw):
                return True

        auth._auth_manager = lambda: AllowAll()
        client = TestClient(create_app(), root_path="/dj-jobs")
        url = "/dag/big_dag/run/run_big"
        airflow_s = _load_airflow()
        t0 = time.perf_counter()
        first = client.get(url, headers={"Authorization": "Bearer x"})
        cold = time.perf_counter() - t0
        assert first.status_code == 200 and first.text.count("class='cell failed'") == 1, first.text[:500]
        print(f"Airflow's import and first metadata-DB look-up (before the first GET): {airflow_s * 1000:.0f} ms")
        print(f"first GET of the page in this process (no events parsed yet): {cold * 1000:.0f} ms")
        if args.cold_only:
            print(f"load average while measuring: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
            return 0
        base = median_s(lambda: job_progress(job_dir), args.repeat)
        data = median_s(lambda: job_data.job_overview(job_dir), args.repeat)
        page = median_s(lambda: client.get(url, headers={"Authorization": "Bearer x"}), args.repeat)
        api = median_s(
            lambda: client.get("/api/job/big/partition/1", headers={"Authorization": "Bearer x"}), args.repeat
        )
        print(f"job_progress (dj-airflow monitor's data), median of {args.repeat}: {base * 1000:.0f} ms")
        print(f"job_overview (the page's data):                {data * 1000:.0f} ms  ({data / base:.2f}x)")
        print(
            f"GET {url} (whole page, {len(first.content) / 1024:.0f} KiB HTML): {page * 1000:.0f} ms  ({page / base:.2f}x)"
        )
        print(f"GET /api/job/big/partition/1 (the partition panel): {api * 1000:.0f} ms")
        print(f"load average while measuring: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
