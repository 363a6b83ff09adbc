"""What ``dj-airflow run`` decided for its in-process run, handed to the DAG's operators as an argument.

Under ``dj-airflow run`` every task runs inside the CLI's own process
(``dag.test()``), and three things differ from a scheduler deployment:

* Ray is a private cluster of this process with the CPU count the CLI chose
  (``ray_cpus``), never the shared embedded head;
* the runner lock names the CLI's pid, which lives as long as the whole run,
  so its death proves the run is gone (a scheduler task's pid does not: each
  task is a short-lived process).  The tasks run inside the CLI's process,
  so that pid is the task's own (:func:`owner_pid`): nothing volatile goes
  into the DAG, whose serialized form stays the same from run to run;
* mapped tasks run one after another, so a task's partitions run as
  concurrent Ray tasks on every core (``max_concurrent_partitions``, unless
  the user set ``DJ_DEFAULT_MAX_CONCURRENT_PARTITIONS``).

The CLI passes these to ``build_dag(local_run=...)``, which hands them to the
operators that need them as a plain dict (operator arguments of mapped
tasks are serialized with the DAG).  Nothing travels through the
environment, so nothing leaks into Ray workers or child processes.  A DAG
built by the scheduler's DAG processor has no ``local_run``: ``None``
everywhere means "a scheduler deployment".
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class LocalRun:
    ray_cpus: int
    max_concurrent_partitions: int | None = None  #: None: the setting or the built-in default
    #: The review gate (operators/review.py): ask on the terminal (True) or fail at once (``--no-input``).
    review_input: bool = True

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def of(cls, value: LocalRun | dict | None) -> LocalRun | None:
        """The typed view of an operator's ``local_run`` argument (a dict after serialization)."""
        if value is None or isinstance(value, LocalRun):
            return value
        return cls(**{k: value[k] for k in ("ray_cpus", "max_concurrent_partitions", "review_input") if k in value})


def ray_cpus(value: Any) -> int | None:
    run = LocalRun.of(value)
    return run.ray_cpus if run else None


def owner_pid(value: Any) -> int | None:
    """The pid that lives as long as the run: this process's under ``dj-airflow run``, else None."""
    return os.getpid() if LocalRun.of(value) else None


def max_concurrent_partitions(value: Any) -> int | None:
    run = LocalRun.of(value)
    return run.max_concurrent_partitions if run else None
