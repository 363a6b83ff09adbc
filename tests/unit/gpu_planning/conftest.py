"""A CUDA-declaring test op for the planning tests.

No op in this repository can run on a GPU here, and the planning code only
asks an op class whether it ``uses_cuda``; this op declares it and passes
rows through unchanged.  It is registered for the duration of each test
and removed afterwards so no other test sees it.
"""

from __future__ import annotations

from typing import ClassVar

import pytest

from airflow_provider_dj.ops import registry
from airflow_provider_dj.ops.base import Mapper

FAKE_GPU_OP = "planning_test_gpu_mapper"


class PlanningTestGpuMapper(Mapper):
    """Declares CUDA (what the planner keys on); returns its input (no GPU exists here)."""

    name = FAKE_GPU_OP
    uses_cuda: ClassVar[bool] = True

    def process_table(self, table):
        return table


@pytest.fixture(autouse=True)
def fake_gpu_op():
    registry.load_builtin_ops()
    registry._REGISTRY[FAKE_GPU_OP] = PlanningTestGpuMapper
    yield FAKE_GPU_OP
    registry._REGISTRY.pop(FAKE_GPU_OP, None)
