"""Ctrl-C and SIGTERM during ``dj-airflow run``, as at any terminal tool.

* The first Ctrl-C (SIGINT) asks for a graceful stop, the request ``dj-airflow stop`` writes
  (client/control.py ``stop_job``): every running partition finishes the op or batch it is in,
  commits it and ends; the run says so and goes on until the stop has landed.
* The second Ctrl-C, or a SIGTERM, asks for a forced stop (``dj-airflow stop --force``): the
  dispatchers cancel the in-flight Ray tasks or kill the pool's workers; committed checkpoints stay.
  If the run has not ended ``cli_force_exit_after_s`` seconds later (a step that cannot be cut
  short, such as a global step running in this process), it is ended: this process's children are
  killed and it exits.  A third Ctrl-C does that at once.  A checkpoint is absent or complete
  whatever is killed when, so the resume is as good either way.

Why a watcher thread reads the signals: Python runs a signal handler in the main thread only
between bytecodes, and the main thread may sit in a long call (a global step, a planning pass, a
C extension).  ``signal.set_wakeup_fd`` makes the interpreter's C-level handler write each
signal's number to a socket the moment it arrives, whichever Python handler is installed, so the
thread sees it at once, even after Ray's ``ray.init`` or Airflow's task runner replaced the Python
handler of SIGTERM.  The Python handler installed here does nothing; ``reinstall`` puts it back
after Ray started, whose own SIGTERM handler would ``sys.exit`` the main thread under Ray's live
core-worker threads (the C++ "unexpected system state" stack trace, and no resume hint).

Installed only from the main thread of a ``dj-airflow run`` (a test calling ``main()`` from another
thread gets the ordinary behaviour), and removed again when the run ends.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
from typing import Callable

log = logging.getLogger(__name__)

#: Exit status of a run ended by Ctrl-C (128 + SIGINT), as a shell reports a command ended by it.
EXIT_SIGINT = 130
#: Exit status of a run ended by SIGTERM (128 + SIGTERM): a supervisor (systemd, Kubernetes, cron's
#: timeout) tells its own termination from a person's Ctrl-C.
EXIT_SIGTERM = 143


class Interrupts:
    """The run's answer to SIGINT and SIGTERM: stop requests in the job directory, then an exit.

    ``note(text)`` tells the person what happens (the live display's note line, or stderr);
    ``hard_exit(code)`` ends the process when a forced stop did not end the run in time."""

    def __init__(
        self,
        job_dir: str,
        job_id: str,
        *,
        note: Callable[[str], None],
        hard_exit: Callable[[int], None],
        force_exit_after_s: float,
    ) -> None:
        self.job_dir = job_dir
        self.job_id = job_id
        self.note = note
        self.hard_exit = hard_exit
        self.force_exit_after_s = force_exit_after_s
        self.sigints = 0
        self.sigterm = False
        self.forced = False
        self._installed = False
        self._prev: dict[int, object] = {}
        self._prev_wakeup = -1
        self._sockets: tuple[socket.socket, socket.socket] | None = None
        self._closing = threading.Event()
        self._lock = threading.Lock()

    # -- what happened -------------------------------------------------------------
    @property
    def requested(self) -> bool:
        """Whether a signal asked this run to stop."""
        return self.sigints > 0 or self.sigterm

    @property
    def exit_code(self) -> int:
        return EXIT_SIGTERM if self.sigterm else EXIT_SIGINT

    # -- installing ----------------------------------------------------------------
    def install(self) -> bool:
        """Take over SIGINT and SIGTERM; False (nothing changed) outside the main thread."""
        if threading.current_thread() is not threading.main_thread():
            return False
        reader, writer = socket.socketpair()
        writer.setblocking(False)
        self._sockets = (reader, writer)
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._prev[sig] = signal.getsignal(sig)
            signal.signal(sig, _ignore)
        self._prev_wakeup = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
        threading.Thread(target=self._watch, name="dj-signals", daemon=True).start()
        self._installed = True
        return True

    def reinstall(self) -> None:
        """Our Python handlers again, after a library replaced them (Ray's ``ray.init``: SIGTERM)."""
        if self._installed and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                if signal.getsignal(sig) is not _ignore:
                    signal.signal(sig, _ignore)

    def uninstall(self) -> None:
        """The handlers and wakeup fd as they were before :meth:`install`."""
        if not self._installed or threading.current_thread() is not threading.main_thread():
            return  # (a hard exit from the watcher thread leaves them: the process ends next)
        self._installed = False
        self._closing.set()
        signal.set_wakeup_fd(self._prev_wakeup)
        for sig, handler in self._prev.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        if self._sockets is not None:
            for s in self._sockets:
                s.close()

    # -- reacting ------------------------------------------------------------------
    def _watch(self) -> None:
        reader = self._sockets[0]
        while not self._closing.is_set():
            try:
                data = reader.recv(64)
            except OSError:
                return
            if not data:
                return
            for signum in data:
                try:
                    self.on_signal(signum)
                except Exception as exc:  # noqa: BLE001 - the watcher must see the next signal too
                    log.warning("handling signal %s failed: %s", signum, exc)

    def on_signal(self, signum: int) -> None:
        """What one SIGINT or SIGTERM does (called by the watcher thread; tests call it directly)."""
        with self._lock:
            if signum == signal.SIGTERM:
                first = not self.sigterm
                self.sigterm = True
                if first and not self.forced:
                    self._force("SIGTERM: stopping now")
                else:
                    self.hard_exit(self.exit_code)
                return
            if signum != signal.SIGINT:
                return
            self.sigints += 1
            if self.sigints == 1 and not self.forced:
                self._request(force=False)
                self.note(
                    "Ctrl-C: stopping at each running partition's next checkpoint; committed work is kept "
                    "(Ctrl-C again to stop now)"
                )
            elif not self.forced:
                self._force("Ctrl-C again: stopping now")
            else:
                self.note("Ctrl-C a third time: ending the run now")
                self.hard_exit(self.exit_code)

    def _force(self, what: str) -> None:
        self.forced = True
        self._request(force=True)
        self.note(f"{what}: in-flight work is cancelled, committed checkpoints are kept")
        if self.force_exit_after_s > 0:
            timer = threading.Timer(self.force_exit_after_s, self._overdue)
            timer.daemon = True
            timer.start()

    def _overdue(self) -> None:
        if self._installed:
            self.note(f"the run did not end within {self.force_exit_after_s:g}s of the forced stop: ending it")
            self.hard_exit(self.exit_code)

    def _request(self, *, force: bool) -> None:
        """The stop request ``dj-airflow stop`` writes (client/control.py ``stop_job``: the request file
        and a ``stop_requested`` event), written straight into this run's job directory: ``stop_job``
        would look the id up, and before the job is planned that could find another work dir's job of
        the same id.  A request written before the plan exists is kept by the job's first step (it was
        made after the run started) and stops the run at its first segment."""
        from airflow_provider_dj.engine.jobdir import stop_control
        from airflow_provider_dj.engine.jobdir.events import EventLog

        who = f"{'SIGTERM to' if self.sigterm else 'Ctrl-C in'} dj-airflow run (pid {os.getpid()})"
        stop_control.request_stop(self.job_dir, force=force, requested_by=who)
        try:
            EventLog(self.job_dir, self.job_id).emit(
                "stop_requested", status="requested", force=bool(force), requested_by=who
            )
        except OSError as exc:  # the request file is what the workers read; the event is for people
            log.warning("could not record the stop_requested event: %s", exc)


def _ignore(signum, frame) -> None:
    """The Python-level handler: the watcher thread acts on the signal (see the module docstring)."""
