"""The process's terminal, shared by a live display and the questions asked on it.

A process has one controlling terminal.  ``dj-airflow run`` draws its live progress display there; a
question asked from anywhere in the same process (the review gate's, including from the DAG's review
task running inside ``dag.test()``) must stop that display first, or the display's next redraw
writes over the question.  A display registers how to stop it while it runs (:func:`register_display`);
:func:`stop_display_for_prompt` calls that, once, before a question is shown.  Nothing is registered
outside ``dj-airflow run``'s live mode, and then the call does nothing.
"""

from __future__ import annotations

import threading
from typing import Callable

_lock = threading.Lock()
_stop_display: Callable[[], None] | None = None


def register_display(stop: Callable[[], None] | None) -> None:
    """``stop`` ends the live display on this process's terminal (idempotent); None: no display any more."""
    global _stop_display
    with _lock:
        _stop_display = stop


def stop_display_for_prompt() -> None:
    """Stop the live display, if one runs, so a question can be written on the terminal."""
    global _stop_display
    with _lock:
        stop, _stop_display = _stop_display, None
    if stop is not None:
        stop()
