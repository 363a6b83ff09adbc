"""Where ``dj-airflow run``'s output goes, and how the run ends on the terminal: one place for both
ways it runs a job (the engine's local executor, cli/run_engine.py; ``--airflow``, cli/main.py).

Three modes:

* ``live`` (stdout is a terminal): the progress display (cli/progress_display.py) on the terminal;
  everything else this process and its children write (the engine's and Airflow's logging, Ray's
  driver messages, a C++ library's stderr) goes to the run's log file, whose path is printed first.
  Both file descriptors 1 and 2 are pointed at the log file, so output no Python logger controls
  lands there too; the display draws on a duplicate of the original terminal.
* ``plain`` (not a terminal: a pipe, cron, CI; or ``--no-progress``, ``TERM=dumb``): the log lines
  on stdout as before, plus a ``progress: ...`` line every ``cli_progress_interval_s`` seconds.
* ``quiet`` (``--quiet``): only errors and the final line(s) on the terminal; the log to its file.

``--verbose`` adds the log lines to the live display's terminal (above the table); elsewhere they are
there already.  Ctrl-C and SIGTERM are cli/interrupts.py's; the final line and exit status of a
stopped run are here.
"""

from __future__ import annotations

import os
import sys
import time
from typing import TextIO

from airflow_provider_dj import settings
from airflow_provider_dj.cli.interrupts import Interrupts
from airflow_provider_dj.cli.run_report import print_completed, stopped_line
from airflow_provider_dj.core import terminal

#: Exit status of a run stopped by ``dj-airflow stop`` (or the job's own stop request), not by a signal.
EXIT_STOPPED = 3


def choose_mode(args) -> str:
    """``live``, ``plain`` or ``quiet`` for these arguments and this stdout (see the module docstring)."""
    if getattr(args, "quiet", False):
        return "quiet"
    if getattr(args, "no_progress", False) or os.environ.get("TERM") == "dumb":
        return "plain"
    try:
        return "live" if sys.stdout.isatty() else "plain"
    except (AttributeError, ValueError):
        return "plain"


class RunOutput:
    """The run's terminal, log file, progress display and signal handling, from ``__enter__`` to ``close``."""

    def __init__(self, args, *, job_dir: str, job_id: str, title: str) -> None:
        self.mode = choose_mode(args)
        self.verbose = bool(getattr(args, "verbose", False))
        self.recipe_file = args.recipe
        self.job_dir, self.job_id, self.title = job_dir, job_id, title
        self.log_path: str | None = None
        self.display = None
        self.run_start = time.time()
        self._saved: tuple[int, int] | None = None
        self._term_out: TextIO = sys.stdout
        self._term_err: TextIO = sys.stderr
        self._console = None
        self._log_fh = None
        self._log_offset = 0
        self.interrupts = Interrupts(
            job_dir,
            job_id,
            note=self.note,
            hard_exit=self._hard_exit,
            force_exit_after_s=float(settings.get("cli_force_exit_after_s")),
        )

    # -- setting up ----------------------------------------------------------------
    def __enter__(self) -> RunOutput:
        self.run_start = time.time()
        if self.mode in ("live", "quiet"):
            self._to_log_file()
        self.interrupts.install()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _to_log_file(self) -> None:
        """Open the run's log file and point fds 1 and 2 at it; the terminal keeps a duplicate of each."""
        try:
            self.log_path = run_log_path(self.job_dir, self.job_id)
            os.makedirs(os.path.dirname(self.log_path), exist_ok=True)
            self._log_fh = open(self.log_path, "ab", buffering=0)
        except OSError as exc:
            print(f"note: no log file ({exc}); the log stays on the terminal", file=sys.stderr)
            self.mode, self.log_path = "plain", None
            return
        sys.stdout.flush()
        sys.stderr.flush()
        saved_out, saved_err = os.dup(1), os.dup(2)
        self._saved = (saved_out, saved_err)
        enc = getattr(sys.stdout, "encoding", None) or "utf-8"
        self._term_out = open(os.dup(saved_out), "w", buffering=1, encoding=enc, errors="replace")
        self._term_err = open(os.dup(saved_err), "w", buffering=1, encoding=enc, errors="replace")
        os.dup2(self._log_fh.fileno(), 1)
        os.dup2(self._log_fh.fileno(), 2)
        if self.mode == "live":
            from airflow_provider_dj.cli.progress_display import make_console

            width = None if _isatty(0) else _terminal_width(saved_out)
            self._console = make_console(self._term_out, width=width)

    def start_display(self) -> None:
        """Start showing progress (after the run's first lines: they stay above the live table)."""
        from airflow_provider_dj.cli.progress_display import LiveProgress, PlainProgress

        if self.mode == "live":
            if self.log_path and self.verbose:  # the lines already on the terminal are not shown again
                self._log_offset = os.path.getsize(self.log_path)
            self.display = LiveProgress(
                self.job_dir,
                self.run_start,
                self._console,
                title=self.title,
                extra_lines=self._new_log_lines if self.verbose else None,
            )
            self.display.start()
            terminal.register_display(self._stop_display)  # a question asked in this process stops it first
        elif self.mode == "plain":
            interval = float(settings.get("cli_progress_interval_s"))
            if interval > 0:
                self.display = PlainProgress(self.job_dir, self.run_start, sys.stdout, interval)
                self.display.start()

    def reinstall_signals(self) -> None:
        """Our signal handlers again, after Ray's start replaced SIGTERM's (cli/interrupts.py)."""
        self.interrupts.reinstall()

    def close(self) -> None:
        """Stop the display, give the signals and the terminal back; idempotent."""
        self._stop_display()
        self.interrupts.uninstall()
        self._restore()

    def stop_display(self) -> None:
        """Stop the progress display for good (before a question on the terminal); idempotent."""
        self._stop_display()

    def _stop_display(self) -> None:
        terminal.register_display(None)
        display, self.display = self.display, None
        if display is not None:
            try:
                display.stop()
            except Exception:  # noqa: BLE001 - the run's last lines matter more than the last redraw
                pass

    def _restore(self) -> None:
        if self._saved is None:
            return
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except (OSError, ValueError):
            pass
        saved, self._saved = self._saved, None
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in saved:
            os.close(fd)
        for fh in (self._term_out, self._term_err):
            fh.flush()

    # -- lines on the terminal -----------------------------------------------------
    def header(self, resume: str, extra: list[str] = ()) -> None:
        """The run's first lines: the resume token (today's wording in a pipe, which scripts read;
        shorter on a terminal), ``extra`` lines, and where the log goes."""
        for line in extra:
            self.say(line)
        if self.mode == "plain":
            self.say(
                f"Resume token: {self.job_id}. Re-trigger with resume={self.job_id} (or {resume}) to resume this job."
            )
        else:
            self.say(f"Job {self.job_id}; resume it with: {resume}")
        if self.log_path:
            self.say(f"Log: {self.log_path}")

    def say(self, text: str) -> None:
        """An informational line: on the terminal (not with ``--quiet``) and in the log."""
        self._log(text)
        if self.mode == "quiet":
            return
        if self._console is not None:
            self._console.print(text, highlight=False, markup=False, soft_wrap=True)
        else:
            print(text, file=self._term_out, flush=True)

    def final(self, text: str, *, err: bool = False, style: str = "") -> None:
        """A line of the run's end: always on the terminal, and in the log."""
        self._log(text)
        if self._console is not None and self._saved is not None:
            self._console.print(text, style=style or None, highlight=False, markup=False, soft_wrap=True)
        else:
            print(text, file=self._term_err if err else self._term_out, flush=True)

    def note(self, text: str) -> None:
        """What the run does about a signal: under the live table, else on stderr."""
        self._log(text)
        display = self.display
        if self.mode == "live" and hasattr(display, "note"):
            display.note(text)
        else:
            print(text, file=self._term_err, flush=True)

    def _log(self, text: str) -> None:
        if self._log_fh is not None:
            try:
                self._log_fh.write((text + "\n").encode("utf-8", "replace"))
            except (OSError, ValueError):
                pass

    def _new_log_lines(self) -> list[str]:
        """Lines added to the log file since the last call (``--verbose`` shows them above the table)."""
        if self.log_path is None:
            return []
        with open(self.log_path, "rb") as fh:
            fh.seek(self._log_offset)
            data = fh.read()
        end = data.rfind(b"\n") + 1
        self._log_offset += end
        return data[:end].decode("utf-8", "replace").splitlines()

    # -- how the run ends ----------------------------------------------------------
    def completed(self, summary: dict, run_id: str, wall: float, *, label: str) -> int:
        """The summary of an exported job; 0."""
        self._stop_display()  # first: with --verbose the display would show the log's copy below too
        print_completed(summary, self.job_id, self.job_dir, run_id, wall, label=label)  # the log (or stdout)
        if self.mode == "plain":
            return 0
        export = summary.get("export") or {}
        if self.mode == "live":
            from airflow_provider_dj.cli.progress_display import funnel_table

            self._console.print()
            self._console.print(funnel_table(summary))
            self.final(f"Exported {export.get('rows', 0):,} rows to {export.get('path')}", style="bold green")
            self.final(f"{label} {run_id}: success in {wall:.1f}s; job {self.job_id} ({self.job_dir})")
            from airflow_provider_dj.engine.execution.reuse import reuse_line

            line = reuse_line(summary.get("reuse"))
            if line:
                self.final(f"Reuse: {line}")
            self.final(f"Log: {self.log_path}", style="dim")
        else:
            self.final(
                f"Exported {export.get('rows', 0):,} rows to {export.get('path')} in {wall:.1f}s (job {self.job_id})"
            )
        return 0

    def stopped(self, wall: float, *, legacy_lines: list[str] | None = None) -> int:
        """A run that ended on a stop request: one line saying what was kept and how to resume.

        Exit status 130 (Ctrl-C) or 143 (SIGTERM) when a signal asked for the stop, else 3
        (``dj-airflow stop`` from elsewhere), whose lines ``legacy_lines`` keep as they were."""
        self._stop_display()
        if not self.interrupts.requested and self.mode == "plain" and legacy_lines:
            for line in legacy_lines:
                self.final(line, err=True)
            return EXIT_STOPPED
        self.final(stopped_line(self.job_dir, self.recipe_file, self.job_id), err=True, style="bold yellow")
        if self.log_path:
            self.final(f"Log: {self.log_path}", err=True, style="dim")
        return self.interrupts.exit_code if self.interrupts.requested else EXIT_STOPPED

    def failed(self, lines: list[str], code: int = 1) -> int:
        """A run that failed (or was refused): its lines on stderr, in red on the terminal."""
        if self.interrupts.requested:  # a stop was asked for, and the run ended on its way down
            return self.stopped(0.0)
        self._stop_display()
        for line in lines:
            self.final(line, err=True, style="red")
        if self.log_path:
            self.final(f"Log: {self.log_path}", err=True, style="dim")
        return code

    def _hard_exit(self, code: int) -> None:
        """A forced stop that did not end the run in time: record it, say so, kill the children, exit."""
        from airflow_provider_dj.engine.runner.stop import record_job_failure

        record_job_failure(self.job_dir, "dj-airflow run", None, stopped=True)
        try:
            self.stopped(0.0)
            self.close()
        finally:
            from airflow_provider_dj.hooks import ray_in_process

            ray_in_process.kill_children()
            os._exit(code)


def run_log_path(job_dir: str, job_id: str) -> str:
    """Where this run's log goes: ``logs/`` of a local job directory; for a job directory on an
    object store, a local folder beside the recent-jobs registry (a log is appended line by line)."""
    from airflow_provider_dj.core import fs as storage
    from airflow_provider_dj.engine.jobdir.layout import LOGS_DIR, cli_run_log

    rel = cli_run_log(time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()), os.getpid())
    if not storage.is_url(job_dir):
        return os.path.join(job_dir, *rel.split("/"))
    from airflow_provider_dj.engine.jobdir.registry import registry_path

    return os.path.join(os.path.dirname(registry_path()), LOGS_DIR, job_id, os.path.basename(rel))


def _isatty(fd: int) -> bool:
    try:
        return os.isatty(fd)
    except OSError:
        return False


def _terminal_width(fd: int) -> int | None:
    try:
        return os.get_terminal_size(fd).columns
    except OSError:
        return None


def add_output_arguments(parser) -> None:
    """``--quiet``, ``--verbose`` and ``--no-progress`` of ``dj-airflow run``."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="print only errors and the final lines; the log goes to the run's log file",
    )
    group.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="on a terminal, show the log lines above the progress display too (they always go to the log file)",
    )
    parser.add_argument(
        "--no-progress",
        action="store_true",
        help="no live display on a terminal: the log lines and a progress line at intervals, as in a pipe",
    )
