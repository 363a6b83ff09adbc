"""Test-only ops with a costly, counted start-up, for the actor-pool tests.

``test_counting_init_mapper`` is ``stateful`` (a stand-in for a model op):
its ``__init__`` sleeps and appends one line (the process id) to
``count_file``, so a test counts real instantiations on disk, independently
of the engine's own ``op_init`` events.  ``test_counting_init_mapper_plain``
is the same op without the flag: it runs as plain Ray tasks, one instance
per partition, and gives the reference export.

Ray workers import this module by name (``engine.execution.actor_pool.op_modules``),
which registers the ops there too.
"""

from __future__ import annotations

import os
import time
from typing import Any, ClassVar

import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_dj.ops.base import Mapper
from airflow_provider_dj.ops.registry import get_op_class, register


class _CountingInit(Mapper):
    def __init__(self, *, count_file: str = "", init_s: float = 0.3, text_key: str = "text", **common: Any) -> None:
        super().__init__(text_key=text_key, **common)
        time.sleep(init_s)  # the "model load"
        if count_file:
            with open(count_file, "a", encoding="utf-8") as fh:
                fh.write(f"{os.getpid()}\n")

    def process_table(self, table: pa.Table) -> pa.Table:
        return table.append_column("n_chars", pc.utf8_length(table.column(self.text_key)))


def _register(cls):
    try:  # registered once per process, whichever test module imports this first
        return get_op_class(cls.name)
    except KeyError:
        return register(cls)


class CountingInitMapper(_CountingInit):
    name: ClassVar[str] = "test_counting_init_mapper"
    stateful: ClassVar[bool] = True


class PlainCountingInitMapper(_CountingInit):
    name: ClassVar[str] = "test_counting_init_mapper_plain"


_register(CountingInitMapper)
_register(PlainCountingInitMapper)


def init_count(path) -> int:
    if not os.path.exists(path):
        return 0
    with open(path, encoding="utf-8") as fh:
        return sum(1 for line in fh if line.strip())
