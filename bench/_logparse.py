"""Pull timings out of the two executors' logs (where does the time go?)."""

from __future__ import annotations

import re
from collections import OrderedDict
from datetime import datetime, timezone

_TS = r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z)"
_START = re.compile(_TS + r".*\[DAG TEST\] starting task_id=(\S+) map_index=(-?\d+)")
_END = re.compile(_TS + r".*\[DAG TEST\] end task task_id=(\S+) map_index=(-?\d+)")
_SUCCESS = re.compile(r"DAG run \S+: success in ([\d.]+)s")
_ANY_TS = re.compile(r"^" + _TS)


def _epoch(ts: str) -> float:
    return datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc).timestamp()


def _group(task_id: str) -> str:
    # partitions_seg0, partitions_seg1 -> partitions_seg*; global_op4_x stays.
    return re.sub(r"_seg\d+$", "_seg*", task_id)


def parse_ours_log(path: str, started_at: float, ended_at: float) -> dict:
    """Per-task wall time from dag.test's "[DAG TEST] starting/end task" lines.

    ``started_at``/``ended_at``: epoch seconds of process launch / exit, so the
    time before the first task (imports, DB check, Ray start, DAG build) and
    after the last one (Ray shutdown, interpreter exit) is visible too.
    """
    starts: dict[tuple[str, str], float] = {}
    tasks: "OrderedDict[str, dict]" = OrderedDict()
    first_start = last_end = None
    inproc = None
    last_ts = None
    try:
        fh = open(path, errors="replace")
    except OSError:
        return {}
    with fh:
        for line in fh:
            m = _ANY_TS.match(line)
            if m:
                last_ts = _epoch(m.group(1))
            m = _START.search(line)
            if m:
                t = _epoch(m.group(1))
                starts[(m.group(2), m.group(3))] = t
                first_start = t if first_start is None else first_start
                continue
            m = _END.search(line)
            if m:
                t = _epoch(m.group(1))
                s = starts.pop((m.group(2), m.group(3)), None)
                if s is not None:
                    g = tasks.setdefault(_group(m.group(2)), {"seconds": 0.0, "count": 0})
                    g["seconds"] += t - s
                    g["count"] += 1
                last_end = t
                continue
            m = _SUCCESS.search(line)
            if m:
                inproc = float(m.group(1))
    out: dict = {"tasks": {k: {"seconds": round(v["seconds"], 3), "count": v["count"]} for k, v in tasks.items()}}
    if first_start is not None:
        out["before_first_task_s"] = round(first_start - started_at, 3)
        out["tasks_span_s"] = round((last_end or first_start) - first_start, 3)
        out["task_sum_s"] = round(sum(v["seconds"] for v in tasks.values()), 3)
    if last_end is not None:
        out["after_last_task_s"] = round(ended_at - last_end, 3)
    if inproc is not None:
        out["cli_reported_s"] = inproc
    if last_ts is not None:
        out["last_log_ts_to_exit_s"] = round(ended_at - last_ts, 3)
    return out


_DJ_OP = re.compile(r"OP \[(\S+)\] Done in ([\d.]+)s\. Left (\d+) samples")
_DJ_ALL = re.compile(r"All OPs are done in ([\d.]+)s")
_DJ_EXEC = re.compile(r"Running executor took ([\d.]+) seconds")


def parse_dj_log(path: str) -> dict:
    out: dict = {"ops": []}
    try:
        fh = open(path, errors="replace")
    except OSError:
        return {}
    with fh:
        for line in fh:
            for part in line.split("\r"):
                m = _DJ_OP.search(part)
                if m:
                    out["ops"].append({"op": m.group(1), "seconds": float(m.group(2)), "left": int(m.group(3))})
                m = _DJ_ALL.search(part)
                if m:
                    out["all_ops_s"] = float(m.group(1))
                m = _DJ_EXEC.search(part)
                if m:
                    out["executor_s"] = float(m.group(1))
    return out


def last_error_line(path: str) -> str | None:
    """The last exception line of the last traceback (or an ``error:`` line), for a failed run's summary."""
    found = None
    in_tb = False
    try:
        with open(path, errors="replace") as fh:
            for line in fh:
                s = line.rstrip("\n")
                if s.startswith("Traceback (most recent call last)"):
                    in_tb = True
                    continue
                if in_tb and s and not s[0].isspace():
                    found, in_tb = s.strip(), False
                elif s.startswith("error:"):
                    found = s.strip()
    except OSError:
        return None
    return found[:400] if found else None


_RAY_INFRA = (
    "raylet died",
    "raylet is unavailable",
    "timed out during startup",
    "Failed to connect to GCS",
    "GCS has become overloaded",
    "When connecting to an existing cluster",
)


def ray_infra_failure(path: str) -> str | None:
    """A failure of Ray itself (killed raylet/GCS), as opposed to a failure of the job."""
    try:
        with open(path, errors="replace") as fh:
            text = fh.read()
    except OSError:
        return None
    for pat in _RAY_INFRA:
        if pat in text:
            return pat
    return None
