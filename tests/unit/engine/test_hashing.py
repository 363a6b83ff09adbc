"""Partition content hashes: order-sensitive, full-content, batch-boundary independent (invariant 4)."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from airflow_provider_dj.engine.input.hashing import ArrowTableHasher, ByteStreamHasher, hash_table

ROWS = [
    {"id": i, "text": f"sample {i} " * (i % 5 + 1), "meta": {"src": "web" if i % 2 else None}, "tags": [i, i + 1]}
    for i in range(500)
]


def _bytes(rows) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def _byte_hash(data: bytes, chunk: int) -> str:
    h = ByteStreamHasher()
    for i in range(0, len(data), chunk):
        h.update(data[i : i + chunk])
    return h.hexdigest()


@pytest.mark.parametrize("chunk", [1, 7, 64, 1000, 1 << 20])
def test_byte_hash_is_independent_of_chunking(chunk):
    data = _bytes(ROWS)
    assert _byte_hash(data, chunk) == _byte_hash(data, len(data))


def test_missing_final_newline_is_the_same_content():
    data = _bytes(ROWS)
    assert _byte_hash(data[:-1], 100) == _byte_hash(data, 100)


@pytest.mark.parametrize("batch", [1, 3, 50, 499, 500])
def test_arrow_hash_is_independent_of_batch_boundaries(batch):
    t = pa.Table.from_pylist(ROWS)
    h = ArrowTableHasher()
    for i in range(0, t.num_rows, batch):
        h.update(t.slice(i, batch))
    assert h.hexdigest() == hash_table(t)
    assert hash_table(t) == hash_table(pa.Table.from_batches(t.to_batches(max_chunksize=batch)))


def _mutations(rows):
    swapped = list(rows)
    swapped[10], swapped[11] = swapped[11], swapped[10]
    edited = [dict(r) for r in rows]
    edited[42]["text"] = edited[42]["text"].replace("sample", "simple")
    nested = [dict(r) for r in rows]
    nested[7] = dict(nested[7], meta={"src": "forum"})
    return {
        "reordered": swapped,
        "edited": edited,
        "edited_nested": nested,
        "row_added": rows + [{"id": 999, "text": "new", "meta": {"src": None}, "tags": []}],
        "row_removed": rows[:100] + rows[101:],
    }


@pytest.mark.parametrize("kind", ["reordered", "edited", "edited_nested", "row_added", "row_removed"])
def test_any_change_changes_both_hashes(kind):
    changed = _mutations(ROWS)[kind]
    assert _byte_hash(_bytes(changed), 4096) != _byte_hash(_bytes(ROWS), 4096)
    assert hash_table(pa.Table.from_pylist(changed)) != hash_table(pa.Table.from_pylist(ROWS))


def test_value_moved_between_rows_changes_the_hash():
    a = pa.table({"text": ["ab", "c"]})
    b = pa.table({"text": ["a", "bc"]})  # same concatenated bytes, different rows
    assert hash_table(a) != hash_table(b)
    assert hash_table(pa.table({"x": [1, None]})) != hash_table(pa.table({"x": [1, 0]}))
