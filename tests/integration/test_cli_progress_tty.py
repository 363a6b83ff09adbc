"""``dj-airflow run`` on a real terminal: the live progress display, Ctrl-C and SIGTERM.

Each run is a real ``dj-airflow run`` in a tmux pane (a pseudo-terminal with a screen: what a person
sees is what ``capture-pane`` returns), on a 400-row corpus in 3 partitions.  A ``delay`` fault holds
partition 1 after its first op (engine/jobdir/faults.py), so the keys land mid-segment whatever the
machine's speed: Ctrl-C is sent once the hold has fired.  The local process pool runs the partitions
(``--executor local``) except in the SIGTERM test, where Ray's shutdown is the subject.

tmux comes from ``scripts/tmux_for_tests.sh`` (installed from Debian's packages as root, as in CI);
without it the tests skip here and fail under CI.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time

import pytest

from airflow_provider_dj.cli.progress_display import POLL_S
from airflow_provider_dj.engine.jobdir.events import read_events
from airflow_provider_dj.engine.jobdir.layout import STOP_REQUEST
from tests.helpers_compare import assert_same_bytes
from tests.integration.crash_helpers import DJ_AIRFLOW, kill_session

pytestmark = pytest.mark.integration

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

RECIPE = """\
project_name: {name}
dataset_path: {data}
export_path: {export}
work_dir: {work}
text_keys: text
partition: {{mode: manual, num_of_partitions: 3}}
checkpoint: {{enabled: true, strategy: every_op}}
process:
  - clean_email_mapper:
  - whitespace_normalization_mapper:
  - words_num_filter: {{min_num: 5, max_num: 2000}}
  - text_length_filter: {{min_len: 20}}
  - document_deduplicator: {{lowercase: true}}
"""

#: Partition 1 holds after op 0 until the stop request is written (graceful: then it stops there).
HOLD_UNTIL_STOP = {
    "point": "after_op",
    "partition_id": 1,
    "op_index": 0,
    "kind": "delay",
    "seconds": 120,
    "until": STOP_REQUEST,
}
#: On the resume, partition 0 waits a second as op 4 (segment 1) starts: long enough for progress lines.
RESUME_PAUSE = {"point": "op_start", "partition_id": 0, "op_index": 4, "kind": "delay", "seconds": 1.0}
#: Partition 1 hangs after op 0 (only a forced stop ends it).
HANG = {"point": "after_op", "partition_id": 1, "op_index": 0, "kind": "hang", "seconds": 120}


def _unavailable(why: str):
    if os.environ.get("CI"):
        pytest.fail(f"CI must run the terminal tests, but {why}")
    pytest.skip(why)


@pytest.fixture(scope="module")
def tmux() -> str:
    proc = subprocess.run(
        ["bash", os.path.join(REPO_ROOT, "scripts", "tmux_for_tests.sh")], capture_output=True, text=True, timeout=600
    )
    if proc.returncode != 0:
        _unavailable(f"no tmux: {proc.stderr.strip()[-500:]}")
    return proc.stdout.strip()


class Pane:
    """One command in a detached tmux session of its own server; the pane stays after the command ends."""

    def __init__(self, tmux: str, tmp_path, name: str, argv: list[str], env: dict, width: int = 120) -> None:
        self.tmux, self.socket = tmux, f"djtest-{os.getpid()}-{name}"
        conf = tmp_path / f"{name}.tmux.conf"
        conf.write_text("set -g remain-on-exit on\nset -g history-limit 2000\n")
        envs = " ".join(f"{k}={_q(v)}" for k, v in env.items())
        run = f"env -u RAY_ADDRESS -u COLUMNS -u LINES {envs} {' '.join(_q(a) for a in argv)}"
        cmd = f"cd {_q(str(tmp_path))} && exec {run}"
        self._tmux("-f", str(conf), "new-session", "-d", "-s", "main", "-x", str(width), "-y", "40", cmd)
        self.pid = int(self._tmux("display", "-p", "-t", "main", "#{pane_pid}").strip())
        self.socket_path = self._tmux("display", "-p", "-t", "main", "#{socket_path}").strip()

    def _tmux(self, *args: str) -> str:
        return subprocess.run(
            [self.tmux, "-L", self.socket, *args], capture_output=True, text=True, check=True, timeout=30
        ).stdout

    def screen(self) -> str:
        """The screen with its scrollback (tmux moves a short screen into it when it writes "Pane is
        dead"), wrapped lines joined, trailing blank lines dropped."""
        return self._tmux("capture-pane", "-p", "-J", "-S", "-", "-t", "main").rstrip("\n") + "\n"

    def keys(self, *keys: str) -> None:
        self._tmux("send-keys", "-t", "main", *keys)

    def exit_status(self) -> int | None:
        """The command's exit status once it ended (minus the signal number if a signal ended it), else None.

        Read from the kernel while the process is a zombie (``/proc/PID/stat``'s last field, the
        status as ``waitpid`` reports it): tmux may reap it seconds after the pane shows it dead."""
        try:
            with open(f"/proc/{self.pid}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except FileNotFoundError:  # reaped: tmux has the status
            fields = self._tmux("display", "-p", "-t", "main", "#{pane_dead_status} #{pane_dead_signal}").split()
            return int(fields[0]) if fields and fields[0].lstrip("-").isdigit() else None
        if fields[0] != "Z":
            return None
        status = int(fields[-1])
        return status >> 8 if status & 0x7F == 0 else -(status & 0x7F)

    def wait_exit(self, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status = self.exit_status()
            if status is not None:
                return status  # (tmux may still be drawing the last output: wait_for the last line)
            time.sleep(0.2)
        raise AssertionError(f"the run did not end in {timeout}s; screen:\n{self.screen()}")

    def wait_for(self, text: str, timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            screen = self.screen()
            if text in screen:
                return screen
            time.sleep(0.2)
        raise AssertionError(f"{text!r} not on the screen after {timeout}s:\n{self.screen()}")

    def close(self) -> None:
        kill_session(self.pid)  # the pane's command leads a session: the run, its pool or Ray, all go
        subprocess.run([self.tmux, "-L", self.socket, "kill-server"], capture_output=True, timeout=30)
        if self.socket_path.endswith(self.socket) and os.path.exists(self.socket_path):
            os.remove(self.socket_path)  # tmux leaves its socket file behind


def _q(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


@pytest.fixture
def pane(tmux, tmp_path):
    panes: list[Pane] = []

    def start(name: str, args: list[str], env: dict | None = None) -> Pane:
        p = Pane(tmux, tmp_path, name, [DJ_AIRFLOW, *args], dict(env or {}))
        panes.append(p)
        return p

    yield start
    for p in panes:
        p.close()


def _recipe(tmp_path, corpus, name: str) -> str:
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        RECIPE.format(name=name, data=corpus, export=tmp_path / f"{name}_out.jsonl", work=tmp_path / "work")
    )
    return str(path)


def _hold(tmp_path, job_id: str, fault: dict) -> str:
    job_dir = tmp_path / "work" / job_id
    job_dir.mkdir(parents=True)
    (job_dir / "_fault_injection.json").write_text(json.dumps([fault]))
    return str(job_dir)


def _wait_fired(job_dir: str, pane: Pane, timeout: float = 120) -> None:
    """Until the hold has fired (partition 1 is inside it), with the display drawn by then."""
    fired = os.path.join(job_dir, "_fault_injection.fired")
    deadline = time.monotonic() + timeout
    while not (os.path.isdir(fired) and os.listdir(fired)):
        if time.monotonic() > deadline or pane.exit_status() is not None:
            raise AssertionError(f"the hold never fired; screen:\n{pane.screen()}")
        time.sleep(0.2)


def _no_noise(screen: str) -> None:
    """Nothing a person should not see on the terminal: tracebacks, Ray's C++ stack, log records."""
    for bad in ("Traceback", "unexpected system state", "*** SIGTERM", "Check failed", " INFO ", " WARNING "):
        assert bad not in screen, f"{bad!r} on the screen:\n{screen}"


def _final_line(screen: str, job_dir: str, recipe_arg: str, job_id: str) -> re.Match:
    pattern = (
        rf"Stopped: (\d) of 3 partitions of segment 0 committed, kept in {re.escape(job_dir)}\. "
        rf"Resume with: dj-airflow run {re.escape(recipe_arg)} --resume {job_id}"
    )
    found = re.search(pattern, screen)
    assert found, f"no final 'Stopped: ...' line on the screen:\n{screen}"
    return found


def test_ctrl_c_once_stops_gracefully_and_the_resume_exports_what_a_clean_run_exports(tmp_path, corpus, pane, capsys):
    recipe = _recipe(tmp_path, corpus, "tty_graceful")
    job_dir = _hold(tmp_path, "graceful", HOLD_UNTIL_STOP)
    run = pane(
        "graceful", ["run", "tty_graceful.yaml", "--executor", "local", "--num-cpus", "2", "--job-id", "graceful"]
    )
    _wait_fired(job_dir, run)
    screen = run.wait_for("segment 0 (ops 0-3)")
    assert "Job graceful; resume it with: dj-airflow run tty_graceful.yaml --resume graceful" in screen
    log_line = re.search(r"^Log: (\S+)$", screen, re.M)
    assert log_line and log_line.group(1).startswith(os.path.join(job_dir, "logs", "dj-airflow-run_")), screen

    run.keys("C-c")
    run.wait_for("Ctrl-C: stopping at each running partition's next checkpoint; committed work is kept")
    assert run.wait_exit(180) == 130, run.screen()
    screen = run.wait_for("Resume with: dj-airflow run tty_graceful.yaml --resume graceful\nLog: ")
    print(f"--- the screen after one Ctrl-C ---\n{screen}")
    _no_noise(screen)
    _final_line(screen, job_dir, "tty_graceful.yaml", "graceful")
    assert re.search(r"segment 0 \(ops 0-3\)\s+\d/3\s+\d+/400\s.*stopped", screen), screen
    requests = read_events(job_dir, "stop_requested")
    assert [r["force"] for r in requests] == [False], requests
    assert requests[0]["requested_by"].startswith("Ctrl-C in dj-airflow run (pid ")
    with open(os.path.join(job_dir, "job_summary.json")) as fh:
        assert json.load(fh)["status"] == "stopped"
    with open(log_line.group(1)) as fh:
        log_text = fh.read()
    assert "STOPPED on request (graceful" in log_text  # the engine's log went to the log file

    # The resume, with its output in a pipe: plain lines (no escape codes), a progress line, the summary.
    # Progress lines come every interval while a step runs, and the resume's work can take less than
    # one: partition 0 waits a second as segment 1 starts it (the hold above has fired and stays spent).
    with open(os.path.join(job_dir, "_fault_injection.json"), "w") as fh:
        json.dump([HOLD_UNTIL_STOP, {**RESUME_PAUSE, "times": 1}], fh)
    resumed = subprocess.run(
        [DJ_AIRFLOW, "run", recipe, "--executor", "local", "--num-cpus", "2", "--resume", "graceful"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "DJ_CLI_PROGRESS_INTERVAL_S": "0.3"},
        timeout=180,
        start_new_session=True,
    )
    assert resumed.returncode == 0, resumed.stdout[-3000:]
    assert "\x1b[" not in resumed.stdout
    assert "Resume token: graceful." in resumed.stdout
    assert "Log: " not in resumed.stdout  # in a pipe the log lines are the output
    assert re.search(r"^progress: segment \d \(.*\): \d/3 partitions, [\d,]+/400 rows", resumed.stdout, re.M), (
        resumed.stdout[-3000:]
    )
    assert "export: " in resumed.stdout

    from airflow_provider_dj.engine.runner.local import run_job

    clean = run_job(recipe, overrides={"export_path": str(tmp_path / "clean_out.jsonl"), "job_id": "clean"}, workers=1)
    with open(tmp_path / "tty_graceful_out.jsonl", "rb") as fh, open(clean.export_path, "rb") as ref:
        assert_same_bytes(fh.read(), ref.read())


def test_ctrl_c_twice_stops_at_once(tmp_path, corpus, pane):
    """Partitions in this process (``--num-cpus 1``), partition 1 hung in a call no stop request can end:
    the second Ctrl-C asks for the forced stop, and the run ends itself once it is overdue."""
    _recipe(tmp_path, corpus, "tty_twice")
    job_dir = _hold(tmp_path, "twice", HANG)
    run = pane(
        "twice",
        ["run", "tty_twice.yaml", "--executor", "local", "--num-cpus", "1", "--job-id", "twice"],
        env={"DJ_CLI_FORCE_EXIT_AFTER_S": "2"},
    )
    _wait_fired(job_dir, run)
    run.keys("C-c")
    run.wait_for("(Ctrl-C again to stop now)")
    t0 = time.monotonic()
    run.keys("C-c")
    assert run.wait_exit(180) == 130, run.screen()
    took = time.monotonic() - t0
    screen = run.wait_for("Resume with: dj-airflow run tty_twice.yaml --resume twice\nLog: ")
    print(f"--- the screen after two Ctrl-C ---\n{screen}")
    assert "Ctrl-C again: stopping now" in screen
    assert "the run did not end within 2s of the forced stop: ending it" in screen
    assert took < 10, f"the second Ctrl-C took {took:.1f}s to end the run"
    _no_noise(screen)
    _final_line(screen, job_dir, "tty_twice.yaml", "twice")
    assert [r["force"] for r in read_events(job_dir, "stop_requested")] == [False, True]


def test_sigterm_on_ray_ends_the_run_with_143_the_resume_hint_and_no_ray_stack(tmp_path, corpus, pane):
    _recipe(tmp_path, corpus, "tty_term")
    job_dir = _hold(tmp_path, "term", HANG)
    run = pane("term", ["run", "tty_term.yaml", "--num-cpus", "2", "--job-id", "term"])  # on Ray
    _wait_fired(job_dir, run, timeout=180)
    os.kill(run.pid, 15)
    assert run.wait_exit(180) == 143, run.screen()
    screen = run.wait_for("Resume with: dj-airflow run tty_term.yaml --resume term\nLog: ")
    print(f"--- the screen after SIGTERM ---\n{screen}")
    assert "SIGTERM: stopping now" in screen
    _no_noise(screen)
    _final_line(screen, job_dir, "tty_term.yaml", "term")
    assert [r["force"] for r in read_events(job_dir, "stop_requested")] == [True]


def test_quiet_prints_only_the_final_lines(tmp_path, corpus, pane):
    """``--quiet`` on a terminal: no display, no log lines; the export line, the log in its file."""
    _recipe(tmp_path, corpus, "tty_quiet")
    run = pane("quiet", ["run", "tty_quiet.yaml", "--executor", "local", "--num-cpus", "1", "--job-id", "q", "-q"])
    assert run.wait_exit(120) == 0, run.screen()
    screen = run.wait_for("(job q)")
    lines = [ln for ln in screen.splitlines() if ln.strip() and not ln.startswith("Pane is dead")]
    assert len(lines) == 1 and re.match(
        r"Exported 353 rows to .*tty_quiet_out\.jsonl in [\d.]+s \(job q\)", lines[0]
    ), screen


@pytest.mark.parametrize(
    ("answer", "where"),
    [("y", ["--executor", "local"]), ("n", ["--executor", "local"]), ("y", ["--airflow"])],
    ids=["engine-yes", "engine-no", "airflow-yes"],
)
def test_a_crossed_review_bound_asks_on_the_terminal_and_the_answer_decides_the_export(
    tmp_path, corpus, pane, answer, where
):
    """A review bound crossed (docs/review_gate.md): the display stops, the review is shown with the
    question; "y" exports what the run without a gate exports, "n" fails the run with no export, the
    checkpoints kept and the resume command shown.  Both answers are events.  Under ``--airflow`` the
    question comes from the DAG's review task inside ``dag.test()``, and the display (a thread of the
    same process) must still stop before it: the question stays the last thing on the screen."""
    path = _recipe(tmp_path, corpus, f"tty_review_{answer}")
    with open(path, "a") as fh:
        fh.write("review:\n  max_removed_fraction: 0.01\n")
    job = f"rv{answer}" + ("air" if "--airflow" in where else "eng")
    run = pane(job, ["run", os.path.basename(path), *where, "--num-cpus", "1", "--job-id", job])
    screen = run.wait_for("Approve the export? [y/N]", timeout=180)
    assert "words_num_filter" in screen and "review.max_removed_fraction" in screen, screen
    time.sleep(4 * POLL_S)  # a display still running would have redrawn over the question by now
    screen = run.screen()
    assert screen.rstrip().endswith("Approve the export? [y/N]"), screen
    run.keys(answer, "Enter")
    status = run.wait_exit(180)
    screen = run.screen()
    export = tmp_path / f"tty_review_{answer}_out.jsonl"
    job_dir = str(tmp_path / "work" / job)
    answered = [e["status"] for e in read_events(job_dir, "review_answered")]
    if answer == "y":
        assert status == 0, screen
        assert export.read_text().count("\n") == 353  # the rows the same recipe exports with no gate
        assert answered == ["approved"]
    else:
        assert status == 1, screen
        assert not export.exists()
        assert f"--resume {job}" in screen, screen
        assert answered == ["rejected"]
        assert any(d.startswith("checkpoint_op_") for d in os.listdir(os.path.join(job_dir, "checkpoints")))
    _no_noise(screen)
