"""The progress display of ``dj-airflow run``: its model from a real job's events, and what it draws.

The job runs in this process (``run_job``, ``workers=1``: no pool, no Ray) on a 120-row corpus in 3
partitions, so the events, plan and summary are a real run's.  The model is fed those events in
order, as the display's thread reads them while the job runs; the drawings go to a recording rich
Console of a fixed width, and the tests read its text.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from airflow_provider_dj.cli import interrupts as interrupts_mod
from airflow_provider_dj.cli.progress_display import funnel_table, render_steps
from airflow_provider_dj.cli.progress_model import EventTail, ProgressModel, fmt_seconds, plain_line
from airflow_provider_dj.cli.run_report import committed_segments, stopped_line
from airflow_provider_dj.engine.jobdir.events import EventLog, read_events
from airflow_provider_dj.engine.jobdir.stop_control import read_stop_request
from airflow_provider_dj.testing.sample_corpus import write_corpus

RECIPE = """\
project_name: progress_unit
dataset_path: {data}
export_path: {out}
work_dir: {work}
partition: {{mode: manual, num_of_partitions: 3}}
checkpoint: {{strategy: every_op}}
process:
  - whitespace_normalization_mapper:
  - words_num_filter: {{min_num: 3}}
  - document_deduplicator:
"""


@pytest.fixture(autouse=True)
def _state_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("DJ_STATE_DIR", str(tmp_path / "state"))


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> dict:
    """A completed 3-partition job, and the time its run started."""
    from airflow_provider_dj.engine.runner.local import run_job

    tmp = tmp_path_factory.mktemp("progress")
    data = write_corpus(str(tmp / "in.jsonl"), 120, seed=9)
    recipe = tmp / "r.yaml"
    recipe.write_text(RECIPE.format(data=data, out=tmp / "out.jsonl", work=tmp / "work"))
    t0 = time.time()
    result = run_job(str(recipe), job_id="done", workers=1)
    return {"job_dir": result.job_dir, "t0": t0, "summary": result.summary, "recipe": str(recipe)}


def _text(renderable, width: int = 110) -> str:
    from rich.console import Console

    console = Console(width=width, record=True, file=open(os.devnull, "w"), color_system=None)
    console.print(renderable)
    return console.export_text()


def test_the_model_counts_each_segment_from_the_events_as_they_arrive(finished):
    events = read_events(finished["job_dir"])
    model = ProgressModel(finished["job_dir"], finished["t0"])
    assert model.load_plan()
    steps = model.snapshot(now=finished["t0"])
    assert [s.key for s in steps] == ["seg0", "global2", "seg1", "export"]
    assert all(s.state == "waiting" for s in steps)
    assert steps[0].partitions_total == 3 and steps[0].rows_total == 120

    # Fed event by event: partitions and rows done never go back, and seg 0 ends with 3/3 and 120 rows.
    done_seen, rows_seen = [], []
    first_complete = None
    for ev in events:
        model.feed([ev])
        seg0 = model.snapshot(now=ev["timestamp"], heartbeats=False)[0]
        done_seen.append(seg0.partitions_done)
        rows_seen.append(seg0.rows_done)
        if first_complete is None and seg0.partitions_done == 1:
            first_complete = seg0
    assert done_seen == sorted(done_seen) and rows_seen == sorted(rows_seen)
    assert first_complete.state == "running" and first_complete.rows_per_s and first_complete.eta_s is not None
    final = {s.key: s for s in model.snapshot(now=events[-1]["timestamp"])}
    assert (final["seg0"].partitions_done, final["seg0"].rows_done, final["seg0"].state) == (3, 120.0, "done")
    assert final["global2"].state == "done" and final["seg1"].state == "done"
    assert final["export"].state == "done" and final["export"].detail.endswith(" rows")
    assert model.job_state == "completed"


def test_events_of_an_earlier_run_do_not_count(finished):
    model = ProgressModel(finished["job_dir"], time.time() + 60)  # a run that starts after all of them
    model.load_plan()
    model.feed(read_events(finished["job_dir"]))
    assert all(s.state == "waiting" for s in model.snapshot())


def test_the_event_tail_returns_each_whole_event_once(tmp_path):
    job_dir = str(tmp_path / "j")
    os.makedirs(job_dir)
    tail = EventTail(job_dir)
    log = EventLog(job_dir, "j")
    log.emit("job_start", status="new")
    assert [e["event_type"] for e in tail.poll()] == ["job_start"]
    assert tail.poll() == []
    path = next(os.path.join(job_dir, n) for n in os.listdir(job_dir) if n.startswith("events_"))
    with open(path, "ab") as fh:
        fh.write(b'{"event_type": "job_complete", "timest')  # a writer in the middle of its line
    assert tail.poll() == []
    with open(path, "ab") as fh:
        fh.write(b'amp": 1}\n')
    assert [e["event_type"] for e in tail.poll()] == ["job_complete"]


def test_a_failed_partition_is_drawn_in_red_with_its_reason(finished):
    model = ProgressModel(finished["job_dir"], finished["t0"])
    model.load_plan()
    now = time.time()
    model.feed(
        [
            {"event_type": "partition_start", "partition_id": 0, "segment": 0, "timestamp": now},
            {"event_type": "partition_start", "partition_id": 1, "segment": 0, "timestamp": now},
            {"event_type": "op_complete", "partition_id": 1, "op_index": 0, "timestamp": now + 1},
            {
                "event_type": "partition_failed",
                "partition_id": 1,
                "segment": 0,
                "error_message": "op 1 (words_num_filter): ValueError: bad row",
                "timestamp": now + 2,
            },
        ]
    )
    steps = model.snapshot(now=now + 3, heartbeats=False)
    assert steps[0].state == "failed" and steps[0].failed == {1: "op 1 (words_num_filter): ValueError: bad row"}
    assert steps[0].rows_done == pytest.approx(40 / 2)  # p1 finished 1 of the segment's 2 ops
    import io

    from rich.console import Console

    out = io.StringIO()
    console = Console(width=110, file=out, force_terminal=True, color_system="standard")
    console.print(render_steps(steps, "r.yaml: job j", 3.0, [("Ctrl-C: stopping", "bold yellow")]))
    drawn = out.getvalue()
    assert "\x1b[31msegment 0, partition 1 failed: op 1 (words_num_filter): ValueError: bad row" in drawn  # red
    text = _text(render_steps(steps, "r.yaml: job j", 3.0, [("Ctrl-C: stopping", "bold yellow")]))
    assert "segment 0, partition 1 failed: op 1 (words_num_filter): ValueError: bad row" in text
    assert "FAILED" in text and "Ctrl-C: stopping" in text
    assert plain_line(steps).endswith(", 1 failed")


def test_a_partition_that_failed_outside_an_op_is_named_by_the_job_failure(finished):
    model = ProgressModel(finished["job_dir"], finished["t0"])
    model.load_plan()
    now = time.time()
    model.feed(
        [
            {"event_type": "partition_start", "partition_id": 2, "segment": 0, "timestamp": now},
            {
                "event_type": "job_failed",
                "error_message": "partitions_seg0 failed: PartitionFailedError: partition 2 failed in segment 0: "
                "InjectedFault: boom",
                "timestamp": now + 1,
            },
        ]
    )
    seg0 = model.snapshot(now=now + 2, heartbeats=False)[0]
    assert seg0.state == "failed" and seg0.failed == {2: "InjectedFault: boom"}


def test_the_table_shows_partitions_rows_rate_and_eta_per_step(finished):
    model = ProgressModel(finished["job_dir"], finished["t0"])
    model.load_plan()
    events = read_events(finished["job_dir"])
    mid = next(i for i, e in enumerate(events) if e["event_type"] == "partition_complete")
    model.feed(events[: mid + 1])
    now = events[mid]["timestamp"] + 0.5
    text = _text(render_steps(model.snapshot(now=now, heartbeats=False), "r.yaml: job done", 2.0, []))
    lines = text.splitlines()
    assert lines[0].startswith("r.yaml: job done")
    assert lines[1].split() == ["step", "partitions", "rows", "rows/s", "time"]
    seg0 = next(ln for ln in lines if ln.startswith("segment 0 (ops 0-1)"))
    assert " 1/3 " in seg0 and "/120" in seg0 and "ETA " in seg0 and seg0.rstrip().endswith("running")
    assert any(ln.startswith("op 2 document_deduplicator (whole dataset)") and "waiting" in ln for ln in lines)
    assert plain_line(model.snapshot(now=now, heartbeats=False)).startswith(
        "progress: segment 0 (ops 0-1): 1/3 partitions, "
    )


def test_the_funnel_table_lists_every_op(finished):
    text = _text(funnel_table(finished["summary"]))
    lines = [ln.rstrip() for ln in text.splitlines()]
    assert lines[0] == "Rows through each op"
    assert lines[1].split() == ["op", "name", "in", "out", "filtered", "duplicates", "failed"]
    for op in finished["summary"]["ops"]:
        row = next(ln for ln in lines if ln.split()[:2] == [str(op["op_index"]), op["op_name"]])
        assert row.split()[2:] == [
            f"{op['rows_in']:,}",
            f"{op['rows_out']:,}",
            f"{op['filtered']:,}",
            f"{op['duplicates']:,}",
            f"{op['failed']:,}",
        ]


def test_the_stopped_line_says_what_was_kept_and_how_to_resume(finished, tmp_path):
    assert committed_segments(finished["job_dir"]) is None  # all committed
    line = stopped_line(finished["job_dir"], "r.yaml", "done")
    assert line == (
        f"Stopped: every segment committed (the rest runs on resume), kept in {finished['job_dir']}. "
        "Resume with: dj-airflow run r.yaml --resume done"
    )
    assert stopped_line(str(tmp_path / "nothing"), "r.yaml", "x").startswith("Stopped before job x was planned")


def test_fmt_seconds():
    assert [fmt_seconds(s) for s in (None, 0.4, 42, 185, 7620)] == ["-", "0s", "42s", "3m05s", "2h07m"]


def test_ctrl_c_asks_for_a_graceful_stop_then_a_forced_one_then_ends_the_run(tmp_path):
    job_dir = str(tmp_path / "job")
    notes, exits = [], []
    ints = interrupts_mod.Interrupts(job_dir, "job", note=notes.append, hard_exit=exits.append, force_exit_after_s=0)
    ints.on_signal(signal.SIGINT)
    assert read_stop_request(job_dir)["force"] is False and ints.requested and ints.exit_code == 130
    assert "Ctrl-C again to stop now" in notes[-1] and not exits
    ints.on_signal(signal.SIGINT)
    assert read_stop_request(job_dir)["force"] is True and "Ctrl-C again: stopping now" in notes[-1]
    assert not exits
    ints.on_signal(signal.SIGINT)
    assert exits == [130]
    assert [e["force"] for e in read_events(job_dir, "stop_requested")] == [False, True]


def test_sigterm_asks_for_a_forced_stop_and_exits_143(tmp_path):
    job_dir = str(tmp_path / "job")
    notes, exits = [], []
    ints = interrupts_mod.Interrupts(job_dir, "job", note=notes.append, hard_exit=exits.append, force_exit_after_s=0)
    ints.on_signal(signal.SIGTERM)
    request = read_stop_request(job_dir)
    assert request["force"] is True and request["requested_by"].startswith("SIGTERM to dj-airflow run")
    assert ints.exit_code == 143 and not exits
    ints.on_signal(signal.SIGTERM)
    assert exits == [143]


def test_the_signal_handlers_are_installed_and_given_back(tmp_path):
    before = (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM))
    ints = interrupts_mod.Interrupts(
        str(tmp_path / "job"), "job", note=lambda t: None, hard_exit=lambda c: None, force_exit_after_s=0
    )
    assert ints.install()
    try:
        assert signal.getsignal(signal.SIGINT) is interrupts_mod._ignore
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # as ray.init does (its own handler)
        ints.reinstall()
        assert signal.getsignal(signal.SIGTERM) is interrupts_mod._ignore
        os.kill(os.getpid(), signal.SIGINT)  # read by the watcher thread through the wakeup fd
        deadline = time.time() + 10
        while not ints.requested and time.time() < deadline:
            time.sleep(0.05)
        assert ints.sigints == 1
    finally:
        ints.uninstall()
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before
