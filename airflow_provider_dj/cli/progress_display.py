"""The progress ``dj-airflow run`` shows while a job runs: a live table on a terminal, plain lines elsewhere.

On a terminal (``LiveProgress``): one row per segment, global step and the export, redrawn in place
(rich's ``Live``): partitions done/total, rows done/total, rows/s, ETA; a failed partition in red
under its segment with the reason; a note line for what the run is doing about it (a stop asked for
by Ctrl-C).  At the end, ``funnel_table`` is the per-op funnel from the job's summary.

Elsewhere (``PlainProgress``: a pipe, cron, CI, ``TERM=dumb``, ``--no-progress``): a plain
``progress: ...`` line every ``cli_progress_interval_s`` seconds, nothing rich-specific.

Both read the job directory (progress_model.py) from a daemon thread, so the job's own thread never
waits on the display, and a display that fails cannot fail the job.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable, TextIO

from airflow_provider_dj.cli.progress_model import EventTail, ProgressModel, StepProgress, fmt_seconds, plain_line

log = logging.getLogger(__name__)

#: Seconds between two looks at the job directory (and two redraws of the live table).
POLL_S = 0.5

_STATE_STYLE = {
    "waiting": ("dim", "waiting"),
    "running": ("bold cyan", "running"),
    "done": ("green", "done"),
    "failed": ("bold red", "FAILED"),
    "stopped": ("yellow", "stopped"),
}


class _Feed:
    """The model of one job, fed from its directory; ``job_dir`` may not exist yet when the run starts."""

    def __init__(self, job_dir: str, run_start: float) -> None:
        self.model = ProgressModel(job_dir, run_start)
        self.tail = EventTail(job_dir)

    def poll(self) -> list[StepProgress]:
        if self.model.load_plan():
            self.model.feed(self.tail.poll())
        return self.model.snapshot()


class _Poller:
    """A daemon thread calling ``tick`` every ``interval`` seconds until ``stop``; one last tick at stop."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="dj-progress", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._safe_tick()

    def _safe_tick(self) -> None:
        with self._lock:
            try:
                self.tick()
            except Exception as exc:
                log.debug("progress display: %s", exc, exc_info=True)

    def tick(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._safe_tick()


class PlainProgress(_Poller):
    """``progress: ...`` lines on ``out`` every ``interval`` seconds while a step runs."""

    def __init__(self, job_dir: str, run_start: float, out: TextIO, interval: float) -> None:
        super().__init__(interval)
        self.feed = _Feed(job_dir, run_start)
        self.out = out
        self._final = False

    def tick(self) -> None:
        line = plain_line(self.feed.poll())
        if line and not self._final:
            print(line, file=self.out, flush=True)

    def stop(self) -> None:
        self._final = True  # the run prints its own last lines
        super().stop()

    def note(self, text: str) -> None:
        print(text, file=self.out, flush=True)


class LiveProgress(_Poller):
    """The live table on ``console`` (a rich Console on the terminal), redrawn every ``POLL_S``."""

    def __init__(
        self,
        job_dir: str,
        run_start: float,
        console,
        *,
        title: str,
        interval: float = POLL_S,
        extra_lines: Callable[[], list[str]] | None = None,
    ) -> None:
        from rich.live import Live

        super().__init__(interval)
        self.extra_lines = extra_lines
        self.feed = _Feed(job_dir, run_start)
        self.console = console
        self.title = title
        self.notes: list[tuple[str, str]] = []
        self.steps: list[StepProgress] = []
        self.t0 = time.time()
        # No stdout/stderr redirection: fds 1 and 2 point at the run's log file (cli/run_output.py), and
        # a print there belongs in the log, not above the table.
        self.live = Live(
            self._render(),
            console=console,
            auto_refresh=False,
            transient=False,
            redirect_stdout=False,
            redirect_stderr=False,
        )

    def start(self) -> None:
        self.live.start()
        super().start()

    def tick(self) -> None:
        for line in self.extra_lines() if self.extra_lines else ():
            self.console.print(line, highlight=False, markup=False, soft_wrap=True)
        self.steps = self.feed.poll()
        self.live.update(self._render(), refresh=True)

    def note(self, text: str, style: str = "bold yellow") -> None:
        """A line under the table (what the run does about a Ctrl-C), shown at the next redraw."""
        self.notes.append((text, style))
        self._safe_tick()

    def stop(self) -> None:
        super().stop()
        self.live.stop()

    def _render(self):
        return render_steps(self.steps, self.title, time.time() - self.t0, self.notes, planned=self.feed.model.planned)


def render_steps(
    steps: list[StepProgress], title: str, elapsed: float, notes: list[tuple[str, str]], *, planned: bool = True
):
    """The live table: a header, one row per step, failed partitions in red, then the notes."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    header = Text.assemble((title, "bold"), ("  " + fmt_seconds(elapsed), "dim"))
    table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
    for name, justify in (
        ("step", "left"),
        ("partitions", "right"),
        ("rows", "right"),
        ("rows/s", "right"),
        ("time", "right"),
        ("", "left"),
    ):
        table.add_column(name, justify=justify, no_wrap=name != "")
    if not planned:
        table.add_row(Text("planning the job (partitions, plan)", style="cyan"), "", "", "", "", "")
    for s in steps:
        style, word = _STATE_STYLE.get(s.state, ("", s.state))
        parts = f"{s.partitions_done}/{s.partitions_total}" if s.kind == "segment" else ""
        rows = f"{int(s.rows_done):,}/{s.rows_total:,}" if s.kind == "segment" else ""
        rate = f"{s.rows_per_s:,.0f}" if s.rows_per_s else ""
        eta = f"ETA {fmt_seconds(s.eta_s)}" if s.eta_s is not None else fmt_seconds(s.elapsed_s) if s.elapsed_s else ""
        status = Text(word, style=style)
        if s.detail:
            status.append(f"  {s.detail}", style="dim")
        table.add_row(Text(s.label, style="" if s.state != "waiting" else "dim"), parts, rows, rate, eta, status)
    # Failures under the table, not in it: a long reason in the first column would squeeze the others.
    failures = [
        Text(f"{s.label.split(' (')[0]}, partition {pid} failed: {_clip(reason)}", style="red")
        for s in steps
        for pid, reason in sorted(s.failed.items())
    ]
    parts = [header, table, *failures]
    parts.extend(Text(text, style=style) for text, style in notes)
    return Group(*parts)


def funnel_table(summary: dict):
    """The per-op funnel of a completed job: rows in, out, filtered, duplicates, failed per op."""
    from rich.table import Table

    table = Table(title="Rows through each op", title_justify="left", box=None, header_style="bold", pad_edge=False)
    for name, justify in (
        ("op", "right"),
        ("name", "left"),
        ("in", "right"),
        ("out", "right"),
        ("filtered", "right"),
        ("duplicates", "right"),
        ("failed", "right"),
    ):
        table.add_column(name, justify=justify, no_wrap=True)
    for op in summary.get("ops") or []:
        failed = int(op.get("failed") or 0)
        table.add_row(
            str(op["op_index"]),
            str(op.get("op_name", "")),
            f"{op['rows_in']:,}",
            f"{op['rows_out']:,}",
            f"{op['filtered']:,}",
            f"{op['duplicates']:,}",
            f"[red]{failed:,}[/red]" if failed else "0",
        )
    return table


def _clip(text: str, limit: int = 160) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def make_console(file: TextIO, *, width: int | None = None, record: bool = False):
    """A rich Console drawing on ``file`` (the terminal the run was started from)."""
    from rich.console import Console

    return Console(file=file, width=width, record=record, highlight=False, soft_wrap=False)
