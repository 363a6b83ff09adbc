"""``gpu_probe_smoke_mapper``: a tiny op that declares ``uses_cuda`` but needs nothing but pyarrow.

Why it exists: ``scripts/gpu_check.sh --smoke`` proves the probe machinery
(sampling, worker subprocess, timings, report) on a machine without torch,
before blaming the model.  It is not registered in the op library, so no
recipe can name it.
"""

from __future__ import annotations

import time
from typing import ClassVar

import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_dj.ops.base import Mapper


class SmokeCudaMapper(Mapper):
    name: ClassVar[str] = "gpu_probe_smoke_mapper"
    uses_cuda: ClassVar[bool] = True
    default_batch_size: ClassVar[int] = 64

    def __init__(self, init_s: float = 0.2, **common) -> None:
        super().__init__(**common)
        time.sleep(init_s)  # stands in for a model load

    def process_table(self, table: pa.Table) -> pa.Table:
        return table.append_column("smoke_len", pc.utf8_length(table.column(self.text_key)))
