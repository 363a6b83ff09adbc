"""A test-only op that records how many frames separate its ``process_table`` from a named caller.

Ray workers import this module by name (``engine.execution.actor_pool.op_modules``), which registers
the op there too.  ``frames_back_to`` is shared with the in-process test (tests/unit/engine/test_call_depth.py).
"""

from __future__ import annotations

import json
import sys
from types import FrameType
from typing import Any, ClassVar

import pyarrow as pa

from airflow_provider_dj.ops.base import Mapper
from airflow_provider_dj.ops.registry import get_op_class, register


def frames_back_to(frame: FrameType | None, name: str, file_end: str) -> tuple[int | None, list[str]]:
    """Steps from ``frame`` back to the nearest frame of function ``name`` in a file ending ``file_end``
    (None: not on the stack), and the function names on the way, innermost first."""
    names: list[str] = []
    n = 0
    while frame is not None:
        code = frame.f_code
        names.append(code.co_name)
        if code.co_name == name and code.co_filename.endswith(file_end):
            return n, names
        frame, n = frame.f_back, n + 1
    return None, names


class CallDepthMapper(Mapper):
    """Passes rows through; appends ``{"depth": n, "path": [...]}`` to ``record`` (a JSON lines file):
    ``n`` frames from its ``process_table`` back to ``entry`` (a function name) in ``entry_file``."""

    name: ClassVar[str] = "test_call_depth_mapper"

    def __init__(
        self, *, record: str = "", entry: str = "", entry_file: str = "", text_key: str = "text", **common: Any
    ) -> None:
        super().__init__(text_key=text_key, **common)
        self.record, self.entry, self.entry_file = record, entry, entry_file

    def process_table(self, table: pa.Table) -> pa.Table:
        depth, path = frames_back_to(sys._getframe(), self.entry, self.entry_file)
        with open(self.record, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"depth": depth, "path": path[: (depth or 0) + 1]}) + "\n")
        return table


def read_depths(record: str) -> list[dict[str, Any]]:
    with open(record, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


try:  # registered once per process, whichever module imports this first
    get_op_class(CallDepthMapper.name)
except KeyError:
    register(CallDepthMapper)
