"""Near-duplicate deduplicators name each removed row's kept representative.

The keep mask is derived from the same representatives, so the tracer's
dup1/dup2 pairs can never disagree with what the export kept.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from airflow_provider_dj.ops.registry import create_op

BASE = "the quick brown fox jumps over the lazy dog while the farmer watches from the old wooden barn door"
TEXTS = [
    BASE,
    "an entirely different sentence about airflow providers and ray clusters running jobs",
    BASE + " today",
    BASE,
    "yet another unrelated line of text about corpus cleaning pipelines",
]


@pytest.mark.parametrize("name", ["document_minhash_deduplicator", "document_simhash_deduplicator"])
def test_representatives_point_at_the_kept_lowest_row(name):
    op = create_op(name, {}, "text")
    table = pa.table({"text": TEXTS})
    parts = [op.compute_hash(table.slice(0, 2)), op.compute_hash(table.slice(2))]
    rep = np.asarray(op.duplicate_representatives(parts))
    keep = np.asarray(op.resolve_global(parts))
    assert rep.tolist()[3] == 0  # the exact copy of row 0 points at row 0
    assert rep[1] == 1 and rep[4] == 4  # unrelated rows are their own representatives
    assert keep.tolist() == (rep == np.arange(len(TEXTS))).tolist()
    assert all(keep[r] and r <= i for i, r in enumerate(rep))  # every representative is kept and lowest
