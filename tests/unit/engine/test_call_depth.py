"""A short path from a job to an op: at most ``MAX_FRAMES`` frames from ``run_job`` to an op's
``process_table``, measured on a real run in this process (docs/architecture.md, "A short path").

Each frame on that path is a step a reader follows and a traceback shows; a wrapper or a lambda that
only passes the call on is one more.  The op is registered into a copy of the registry, so no other test
sees it.  The same path in a Ray task, from the remote ``segment_task``, is measured in
tests/integration/test_call_depth_ray.py."""

from __future__ import annotations

import sys
from types import FrameType
from typing import ClassVar

import pyarrow as pa
import pytest

from airflow_provider_dj.engine import run_job
from airflow_provider_dj.engine.runner import local
from airflow_provider_dj.ops import registry
from airflow_provider_dj.ops.base import Mapper
from tests.unit.engine.recipe_helpers import small_recipe

MAX_FRAMES = 10


def frames_back_to(frame: FrameType | None, code: object) -> tuple[int | None, list[str]]:
    """Steps from ``frame`` back to the nearest frame running ``code`` (None: not on the stack), and
    the function names on the way, innermost first."""
    names: list[str] = []
    n = 0
    while frame is not None:
        names.append(frame.f_code.co_name)
        if frame.f_code is code:
            return n, names
        frame, n = frame.f_back, n + 1
    return None, names


class CallDepthMapper(Mapper):
    """Passes its rows through and records how far its ``process_table`` is from ``run_job``."""

    name: ClassVar[str] = "call_depth_mapper_for_tests"
    seen: ClassVar[list[tuple[int | None, list[str]]]] = []

    def process_table(self, table: pa.Table) -> pa.Table:
        CallDepthMapper.seen.append(frames_back_to(sys._getframe(), local.run_job.__code__))
        return table


@pytest.fixture
def depth_op(monkeypatch):
    registry.op_names()  # the built-in ops, loaded on first use
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    registry.register(CallDepthMapper)
    CallDepthMapper.seen.clear()
    yield CallDepthMapper.seen
    CallDepthMapper.seen.clear()


def test_run_job_reaches_process_table_within_ten_frames(tmp_path, depth_op):
    recipe = small_recipe(tmp_path, "depth", "  - lowercase_mapper\n  - call_depth_mapper_for_tests\n", rows=40)
    result = run_job(recipe, job_id="depth", workers=1)  # partitions in this process
    assert result.rows == 40
    assert len(depth_op) == 2, depth_op  # one call per partition (2 partitions)
    for depth, path in depth_op:
        assert depth is not None, f"run_job is not on the op's stack: {path}"
        chain = " <- ".join(path[: depth + 1])
        assert depth <= MAX_FRAMES, f"{depth} frames from run_job to process_table (at most {MAX_FRAMES}): {chain}"
