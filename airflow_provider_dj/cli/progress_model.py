"""Where a running job is, step by step, folded from its job directory: what ``dj-airflow run`` shows.

The source is the job directory, not the engine's log text: the events every partition task writes
(``events_*.jsonl``: op and partition starts, completions, failures, stops; the global steps; the
export), the plan (segments, ops, partitions and their rows) and the heartbeats of the partitions in
flight (rows done inside the op they are in).  So the same model serves both ways the command runs a
job (the engine's local executor and ``--airflow``'s ``dag.test()``), whichever process or Ray worker
did the work, and the display needs no hook in the engine.

Only events written since this run began count (``run_start``, a ``time.time()`` taken by the CLI
before the job starts): a resumed job's earlier work shows up as the ``already_complete`` partitions
and loaded checkpoints this run reports, and rows per second count only the rows this run computed.

Nothing here knows about terminals: ``progress_display.py`` draws the rows, ``plain_line`` is the
text a log file or a pipe gets.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field

from airflow_provider_dj.core import fs as storage
from airflow_provider_dj.engine.jobdir.events import iter_event_files, parse_event_lines
from airflow_provider_dj.engine.jobdir.heartbeat import read_heartbeat
from airflow_provider_dj.engine.jobdir.layout import PARTITIONING_INFO

#: How ``PartitionFailedError`` names the partition (engine/runner/dispatch.py, engine/execution/ray_dispatch.py).
_PARTITION_FAILED = re.compile(r"partition (\d+) failed in segment (\d+): (.*)", re.S)


@dataclass
class StepProgress:
    """One row of the display: a segment, a global step or the export."""

    key: str  # "seg0", "global4", "export"
    label: str
    kind: str  # segment | global | export
    partitions_total: int = 0
    partitions_done: int = 0
    rows_total: int = 0
    rows_done: float = 0.0  # finished partitions' rows plus the finished share of those in flight
    state: str = "waiting"  # waiting | running | done | failed | stopped
    failed: dict[int, str] = field(default_factory=dict)  # partition -> reason
    rows_per_s: float | None = None
    eta_s: float | None = None
    elapsed_s: float | None = None
    detail: str = ""  # a global step's or the export's result line


class EventTail:
    """Events of one job directory, read incrementally: each call returns the whole events written
    since the previous call.  A local file is read from where the last call stopped; an object store
    (no appends, objects rewritten whole) is read again and events already seen are skipped."""

    def __init__(self, job_dir: str) -> None:
        self.job_dir = job_dir
        self._offsets: dict[str, int] = {}
        self._seen: set[tuple] = set()
        self._remote = storage.is_url(job_dir)

    def poll(self) -> list[dict]:
        try:
            paths = iter_event_files(self.job_dir)
        except (FileNotFoundError, OSError):
            return []
        out: list[dict] = []
        for path in paths:
            out.extend(self._read_remote(path) if self._remote else self._read_local(path))
        out.sort(key=lambda e: (e.get("timestamp", 0), str(e.get("writer", "")), e.get("seq", 0)))
        return out

    def _read_local(self, path: str) -> list[dict]:
        start = self._offsets.get(path, 0)
        try:
            with open(path, "rb") as fh:
                fh.seek(start)
                data = fh.read()
        except OSError:
            return []
        end = data.rfind(b"\n") + 1  # a torn or half-written last line waits for the next call
        self._offsets[path] = start + end
        return parse_event_lines(data[:end])

    def _read_remote(self, path: str) -> list[dict]:
        try:
            events = parse_event_lines(storage.read_bytes(path))
        except OSError:
            return []
        fresh = []
        for ev in events:
            key = (ev.get("writer"), ev.get("seq"), ev.get("timestamp"))
            if key not in self._seen:
                self._seen.add(key)
                fresh.append(ev)
        return fresh


@dataclass
class _Segment:
    index: int
    op_indices: list[int]
    keys_for_global: int | None
    done: set[int] = field(default_factory=set)  # partitions that finished the segment
    ops_done: dict[int, set[int]] = field(default_factory=dict)  # partition -> op indices done this run
    in_flight: set[int] = field(default_factory=set)
    skipped_rows: int = 0  # rows of partitions found complete: no work this run
    stopped: set[int] = field(default_factory=set)
    failed: dict[int, str] = field(default_factory=dict)
    first_at: float | None = None
    last_at: float | None = None


class ProgressModel:
    """Per-step progress of one job, from its events (``feed``) and in-flight heartbeats (``snapshot``)."""

    def __init__(self, job_dir: str, run_start: float) -> None:
        self.job_dir = job_dir
        self.run_start = run_start
        self.planned = False
        self.rows: dict[int, int] = {}  # partition -> input rows
        self.segments: list[_Segment] = []
        self.globals: dict[int, dict] = {}  # op index -> {name, start, end, detail}
        self.export: dict = {}
        self.job_state = "starting"  # starting | running | completed | stopped | failed
        self.stop_requested: dict | None = None
        self._op_segment: dict[int, int] = {}
        self.total_rows = 0

    # -- the plan ------------------------------------------------------------------
    def load_plan(self) -> bool:
        """Read the plan once it exists (the job's first step writes it); True once loaded."""
        if self.planned:
            return True
        if not storage.exists(storage.join(self.job_dir, *PARTITIONING_INFO.split("/"))):
            return False
        from airflow_provider_dj.engine.storage.context import JobContext

        try:
            ctx = JobContext(self.job_dir)
            plan, info = ctx.plan, ctx.partitioning_info
        except (OSError, ValueError, KeyError):
            return False  # written a moment from now: look again at the next poll
        self.rows = {p["partition_id"]: int(p["num_rows"]) for p in info["partitions"]}
        self.total_rows = int(info.get("total_rows", sum(self.rows.values())))
        for seg in plan.segments:
            s = _Segment(seg.index, list(seg.op_indices), seg.keys_for_global)
            self.segments.append(s)
            for i in s.op_indices:
                self._op_segment[i] = seg.index
            if seg.keys_for_global is not None:
                self.globals[seg.keys_for_global] = {"name": plan.ops[seg.keys_for_global].name}
        self.planned = True
        return True

    # -- events ------------------------------------------------------------------
    def feed(self, events: list[dict]) -> None:
        """Fold events in time order; those from before this run are ignored."""
        for ev in events:
            if float(ev.get("timestamp", 0)) < self.run_start:
                continue
            self._fold(ev)

    def _fold(self, ev: dict) -> None:
        kind, ts = ev.get("event_type"), float(ev.get("timestamp", 0))
        if ev.get("partition_id") is None:
            self._fold_job(ev, kind, ts)
        elif self.segments:
            self._fold_partition(ev, kind, ts)

    def _fold_job(self, ev: dict, kind: str, ts: float) -> None:
        """A job-level event: the job's state, a stop request, a global step, the export."""
        op = ev.get("op_index")
        if kind == "job_start":
            self.job_state = "running"
        elif kind == "job_complete":
            self.job_state = "completed"
        elif kind == "job_stopped":
            self.job_state = "stopped"
        elif kind == "job_failed":
            self.job_state = "failed"
            self._job_failed(str(ev.get("error_message") or "failed"))
        elif kind == "stop_requested":
            self.stop_requested = {"force": bool(ev.get("force")), "by": ev.get("requested_by")}
        elif kind in ("global_op_start", "global_op_complete") and op is not None:
            g = self.globals.setdefault(op, {"name": ev.get("op_name", "")})
            g["start" if kind == "global_op_start" else "end"] = ts
            if kind == "global_op_complete":
                g["detail"] = ev.get("status") or ""
        elif kind in ("export_start", "export_complete"):
            self.export["start" if kind == "export_start" else "end"] = ts
            if kind == "export_complete":
                self.export["rows"] = ev.get("output_rows")

    def _job_failed(self, error: str) -> None:
        """A job's failure names the partition when one failed outside an op (a crashed worker, an error
        between ops), which writes no ``partition_failed``: its segment shows it as failed."""
        found = _PARTITION_FAILED.search(error)
        if found and self.segments and int(found.group(2)) < len(self.segments):
            seg = self.segments[int(found.group(2))]
            seg.failed.setdefault(int(found.group(1)), found.group(3))
            seg.in_flight.discard(int(found.group(1)))

    def _fold_partition(self, ev: dict, kind: str, ts: float) -> None:
        """A partition's event: where it is in its segment."""
        pid, op = ev["partition_id"], ev.get("op_index")
        seg = self._segment_of(ev)
        if seg is None:
            return
        seg.first_at = seg.first_at or ts
        seg.last_at = ts
        if kind == "partition_start":
            seg.in_flight.add(pid)
            seg.failed.pop(pid, None)
        elif kind == "partition_complete":
            seg.in_flight.discard(pid)
            seg.done.add(pid)
            seg.failed.pop(pid, None)
            if ev.get("status") == "already_complete":
                seg.skipped_rows += self.rows.get(pid, 0)
        elif kind == "partition_failed":
            seg.in_flight.discard(pid)
            seg.failed[pid] = str(ev.get("error_message") or "failed")
        elif kind == "partition_stopped":
            seg.in_flight.discard(pid)
            seg.stopped.add(pid)
        elif kind == "op_complete" and op is not None:
            seg.ops_done.setdefault(pid, set()).add(op)
        elif kind == "checkpoint_load" and op is not None:  # a resume: the ops up to ``op`` are done
            seg.ops_done.setdefault(pid, set()).update(i for i in seg.op_indices if i <= op)

    def _segment_of(self, ev: dict) -> _Segment | None:
        index = ev.get("segment")
        if index is None and ev.get("op_index") is not None:
            index = self._op_segment.get(ev["op_index"])
        if index is None or not 0 <= int(index) < len(self.segments):
            return None
        return self.segments[int(index)]

    # -- what to show ------------------------------------------------------------
    def snapshot(self, now: float | None = None, *, heartbeats: bool = True) -> list[StepProgress]:
        """One row per segment, per global step and for the export, in the job's order."""
        now = time.time() if now is None else now
        out: list[StepProgress] = []
        for seg in self.segments:
            out.append(self._segment_row(seg, now, heartbeats))
            if seg.keys_for_global is not None:
                out.append(self._global_row(seg.keys_for_global, now))
        if self.planned:
            out.append(self._export_row(now))
        return out

    def _segment_row(self, seg: _Segment, now: float, heartbeats: bool) -> StepProgress:
        total_rows = sum(self.rows.values())
        n_ops = max(1, len(seg.op_indices))
        done_rows = float(sum(self.rows.get(p, 0) for p in seg.done))
        # Partitions in flight, stopped or failed count the ops they finished (committed) this run.
        for pid in (seg.in_flight | set(seg.ops_done)) - seg.done:
            share = len(seg.ops_done.get(pid, set()) & set(seg.op_indices)) / n_ops
            if heartbeats and pid in seg.in_flight:
                share += self._in_op_share(seg, pid) / n_ops
            done_rows += min(1.0, share) * self.rows.get(pid, 0)
        ops = seg.op_indices
        what = f"ops {ops[0]}-{ops[-1]}" if len(ops) > 1 else (f"op {ops[0]}" if ops else "applies the keep mask")
        row = StepProgress(
            key=f"seg{seg.index}",
            label=f"segment {seg.index} ({what})",
            kind="segment",
            partitions_total=len(self.rows),
            partitions_done=len(seg.done),
            rows_total=total_rows,
            rows_done=min(done_rows, float(total_rows)),
            failed=dict(seg.failed),
        )
        if seg.failed:
            row.state = "failed"
        elif len(seg.done) == len(self.rows) and self.rows:
            row.state = "done"
        elif seg.stopped:
            row.state = "stopped"
        elif seg.first_at is not None:
            row.state = "running"
        if seg.first_at is not None:
            end = now if row.state == "running" else (seg.last_at or now)
            row.elapsed_s = max(0.0, end - seg.first_at)
            worked = row.rows_done - seg.skipped_rows
            if row.elapsed_s > 0 and worked > 0:
                row.rows_per_s = worked / row.elapsed_s
                if row.state == "running":
                    row.eta_s = (row.rows_total - row.rows_done) / row.rows_per_s
        return row

    def _in_op_share(self, seg: _Segment, pid: int) -> float:
        """How far partition ``pid`` is inside the op it runs now (0..1), from its heartbeat."""
        beat = read_heartbeat(self.job_dir, pid)
        if not beat or beat.get("segment") != seg.index or float(beat.get("started_at") or 0) < self.run_start:
            return 0.0
        rows_in, rows_done = beat.get("rows_in"), beat.get("rows_done")
        if beat.get("op_index") in seg.ops_done.get(pid, set()) or not rows_in or not rows_done:
            return 0.0
        return min(1.0, float(rows_done) / float(rows_in))

    def _global_row(self, op_index: int, now: float) -> StepProgress:
        g = self.globals.get(op_index, {})
        row = StepProgress(
            key=f"global{op_index}",
            label=f"op {op_index} {g.get('name', '')} (whole dataset)",
            kind="global",
            partitions_total=len(self.rows),
            rows_total=sum(self.rows.values()),
        )
        if g.get("end"):
            row.state, row.partitions_done, row.rows_done = "done", row.partitions_total, float(row.rows_total)
            row.elapsed_s = g["end"] - g.get("start", g["end"])
        elif g.get("start"):
            row.state, row.elapsed_s = "running", now - g["start"]
        return row

    def _export_row(self, now: float) -> StepProgress:
        row = StepProgress(key="export", label="export", kind="export", rows_total=sum(self.rows.values()))
        if self.export.get("end"):
            row.state = "done"
            row.elapsed_s = self.export["end"] - self.export.get("start", self.export["end"])
            row.detail = f"{self.export['rows']:,} rows" if self.export.get("rows") is not None else ""
        elif self.export.get("start"):
            row.state, row.elapsed_s = "running", now - self.export["start"]
        return row

    def current_segment(self) -> int | None:
        """The segment this run works on now (the last one with activity), or None."""
        active = [s.index for s in self.segments if s.first_at is not None]
        return active[-1] if active else None


def plain_line(steps: list[StepProgress]) -> str | None:
    """The one-line summary a pipe or a log file gets at each interval: the step running now."""
    running = [s for s in steps if s.state == "running"] or [s for s in steps if s.state == "failed"]
    if not running:
        return None
    s = running[0]
    if s.kind != "segment":
        return f"progress: {s.label}: running for {fmt_seconds(s.elapsed_s)}"
    line = (
        f"progress: {s.label}: {s.partitions_done}/{s.partitions_total} partitions, "
        f"{int(s.rows_done):,}/{s.rows_total:,} rows"
    )
    if s.rows_per_s:
        line += f", {s.rows_per_s:,.0f} rows/s"
    if s.eta_s is not None:
        line += f", ETA {fmt_seconds(s.eta_s)}"
    if s.failed:
        line += f", {len(s.failed)} failed"
    return line


def fmt_seconds(seconds: float | None) -> str:
    """``42s``, ``3m05s``, ``2h07m``: durations as a person reads them on a terminal."""
    if seconds is None:
        return "-"
    s = int(round(max(0.0, seconds)))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


def read_summary(job_dir: str) -> dict | None:
    """The job's ``job_summary.json``, or None while it has none."""
    from airflow_provider_dj.engine.job.summary import read_job_summary

    try:
        return read_job_summary(job_dir)
    except (OSError, ValueError, json.JSONDecodeError):
        return None
