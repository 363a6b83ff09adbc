"""Small CPU ops that *declare* uses_cuda=True, for testing the GPU preflight without a GPU.

They are not in the op registry; tests register them for one test at a
time.  They live in an importable module (not a test file) so spawned probe
subprocesses and Ray workers can unpickle them by reference.
"""

from __future__ import annotations

import os
import time
from typing import ClassVar

import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_dj.engine.preflight import image_chain
from airflow_provider_dj.ops.base import Filter, Mapper

#: Where the spy ops note each batch they process ("<pid> <op name>" lines), when set.
OP_LOG_ENV = "DJ_PROBE_TEST_OP_LOG"


class FakeEmbedMapper(Mapper):
    """'Loads a model' (sleeps init_s) once, then appends a length-based vector column."""

    name: ClassVar[str] = "fake_cuda_embed_mapper"
    uses_cuda: ClassVar[bool] = True
    expensive: ClassVar[bool] = True
    default_batch_size: ClassVar[int] = 16
    input_columns: ClassVar[tuple] = ("text",)
    output_columns: ClassVar[tuple] = ("embedding",)

    def __init__(self, init_s: float = 0.05, **common) -> None:
        super().__init__(**common)
        time.sleep(init_s)
        self.model = bytearray(4 << 20)  # a 4 MiB "model"

    def process_table(self, table: pa.Table) -> pa.Table:
        lens = pc.utf8_length(table.column(self.text_key)).to_pylist()
        vecs = [[float(n), float(n % 7)] for n in lens]
        if "embedding" in table.column_names:
            table = table.drop_columns(["embedding"])
        return table.append_column("embedding", pa.array(vecs, pa.list_(pa.float32())))


class FakeCudaEmptyMapper(Mapper):
    name: ClassVar[str] = "fake_cuda_empty_mapper"
    uses_cuda: ClassVar[bool] = True

    def process_table(self, table: pa.Table) -> pa.Table:
        return table.slice(0, 0)


class FakeCudaRaisingMapper(Mapper):
    name: ClassVar[str] = "fake_cuda_raising_mapper"
    uses_cuda: ClassVar[bool] = True

    def process_table(self, table: pa.Table) -> pa.Table:
        raise ValueError("model weights are corrupt")


class FakeCudaStuckMapper(Mapper):
    name: ClassVar[str] = "fake_cuda_stuck_mapper"
    uses_cuda: ClassVar[bool] = True

    def __init__(self, **common) -> None:
        super().__init__(**common)
        time.sleep(3600)  # a model load that never returns

    def process_table(self, table: pa.Table) -> pa.Table:  # pragma: no cover
        return table


class FakeCudaDropAllFilter(Filter):
    name: ClassVar[str] = "fake_cuda_drop_all_filter"
    uses_cuda: ClassVar[bool] = True

    def compute_stats(self, table: pa.Table) -> pa.Table:
        return table

    def keep_mask(self, table: pa.Table) -> pa.Array:
        return pa.array([False] * table.num_rows)


class _Spy:
    """Notes "<pid> <op name>" in $DJ_PROBE_TEST_OP_LOG for every batch the op processes: an account of
    which ops ran in which worker that does not come from the probe's own bookkeeping."""

    def process_table(self, table: pa.Table) -> pa.Table:
        path = os.environ.get(OP_LOG_ENV)
        if path:
            with open(path, "a", encoding="utf-8") as fh:  # one short line per write: no interleaving
                fh.write(f"{os.getpid()} {self.name}\n")
        return super().process_table(table)


class SpyBucketResizeMapper(_Spy, image_chain.BucketResizeMapper):
    pass


class SpyImageQualityMapper(_Spy, image_chain.ImageQualityMapper):
    pass


class SpyImageRotationMapper(_Spy, image_chain.ImageRotationMapper):
    pass


#: The example image chain with spies, under the example ops' names (register them in their place).
IMAGE_CHAIN_SPIES = [SpyBucketResizeMapper, SpyImageQualityMapper, SpyImageRotationMapper]

ALL = [FakeEmbedMapper, FakeCudaEmptyMapper, FakeCudaRaisingMapper, FakeCudaStuckMapper, FakeCudaDropAllFilter]
