"""The op extension point: what a new mapper, filter or deduplicator must write.

The kinds are abstract classes, so an op missing a required method fails
where it is built (a TypeError naming the method), not in the middle of a
run when the engine first calls it.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from airflow_provider_dj.ops.base import Deduplicator, Filter, Mapper, SignatureDeduplicator
from airflow_provider_dj.ops.registry import get_op_class


class _StatsOnlyFilter(Filter):
    name = "test_stats_only_filter"

    def compute_stats(self, table: pa.Table) -> pa.Table:
        return table


class _NoProcessMapper(Mapper):
    name = "test_no_process_mapper"


class _SignaturesOnly(SignatureDeduplicator):
    name = "test_signatures_only"

    def compute_hash(self, table: pa.Table) -> pa.Table:
        return pa.table({"sig": pa.array(range(table.num_rows), pa.int64())})


class _KeepFirstOfEachSignature(_SignaturesOnly):
    name = "test_keep_first_of_each_signature"

    def resolve_global(self, tables: list[pa.Table]) -> np.ndarray:
        sigs = np.concatenate([t.column("sig").to_numpy() for t in tables])
        _, first = np.unique(sigs, return_index=True)
        keep = np.zeros(len(sigs), bool)
        keep[first] = True
        return keep


@pytest.mark.parametrize(
    ("cls", "missing"),
    [(_StatsOnlyFilter, "keep_mask"), (_NoProcessMapper, "process_table"), (_SignaturesOnly, "resolve_global")],
)
def test_an_op_missing_a_required_method_cannot_be_built(cls: type, missing: str) -> None:
    with pytest.raises(TypeError, match=missing):
        cls()


def test_a_signature_deduplicator_needs_only_its_two_phases() -> None:
    op = _KeepFirstOfEachSignature()
    parts = [pa.table({"sig": [1, 2]}), pa.table({"sig": [2, 3, 1]})]
    assert op.resolve_global(parts).tolist() == [True, True, False, True, False]
    assert op.duplicate_representatives(parts) is None  # the tracer then names no kept partner
    assert op.is_global and op.kind == "deduplicator"


def test_builtin_deduplicators_declare_their_global_phase() -> None:
    """The engine picks the global phase by class: key equality, or the op's own resolve_global."""
    exact = get_op_class("document_deduplicator")
    assert issubclass(exact, Deduplicator) and not issubclass(exact, SignatureDeduplicator)
    for name in ("document_minhash_deduplicator", "document_simhash_deduplicator"):
        assert issubclass(get_op_class(name), SignatureDeduplicator), name
