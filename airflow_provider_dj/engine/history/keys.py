"""History keys: the 128-bit key (two uint64 words) each row contributes to, and looks up in, a history index.

* ``document_deduplicator``: the op's own 16-byte key (xxh3-128 of the normalized text), one per row.
* ``document_minhash_deduplicator``: one key per LSH band, ``(mix64(digest + band * K), band)``. The op
  puts two rows in one cluster when any band is equal (it verifies no Jaccard similarity), so sharing one
  band key with a history row is exactly its criterion.  ``mix64`` is a bijection of uint64, so the key is
  exact (band and digest are recoverable) and its first byte, the shard prefix, is evenly spread even for
  one-row bands, whose digests are below 2**32.

``key_args`` names what makes the keys: a history built with other arguments would silently never match,
so a recipe that differs is refused (``HistoryIndex.check_key_args``).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_dj.engine.storage.global_op_state import KEYS_COLUMN
from airflow_provider_dj.ops.dedup.near import GOLDEN_K1, mix64
from airflow_provider_dj.ops.kernels.keys import KEY_TYPE

_EXACT = "document_deduplicator"
_MINHASH = "document_minhash_deduplicator"


def key_args(op_impl) -> dict:
    """The arguments that determine ``op_impl``'s history keys (recorded in the index's manifest)."""
    if op_impl.name == _EXACT:
        return {
            "lowercase": bool(op_impl.lowercase),
            "ignore_non_character": bool(op_impl.ignore_non_character),
        }
    if op_impl.name == _MINHASH:
        return {
            "tokenization": op_impl.tokenization,
            "window_size": int(op_impl.window_size),
            "lowercase": bool(op_impl.lowercase),
            "ignore_pattern": op_impl.ignore_pattern,
            "num_permutations": int(op_impl.num_permutations),
            "num_bands": int(op_impl.num_bands),
            "num_rows_per_band": int(op_impl.num_rows_per_band),
        }
    raise ValueError(f"{op_impl.name} cannot deduplicate against history")


def keys_per_row(op_impl) -> int:
    return int(op_impl.num_bands) if op_impl.name == _MINHASH else 1


def row_keys(op_impl, keys: pa.Table, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """History keys of the rows ``rows`` (positions in ``keys``, one partition's or all partitions' key
    table): ``(k0, k1, which)`` where ``which[i]`` is the position in ``rows`` key ``i`` belongs to.
    MinHash rows give one key per band, band-major."""
    rows = np.asarray(rows, dtype=np.int64)
    if op_impl.name == _EXACT:
        col = keys.column(KEYS_COLUMN).combine_chunks()
        if col.type != KEY_TYPE:
            col = col.cast(KEY_TYPE)
        taken = col.take(pa.array(rows)) if len(rows) else pa.array([], KEY_TYPE)
        words = np.frombuffer(taken.buffers()[1], dtype="<u8")[2 * taken.offset : 2 * (taken.offset + len(taken))]
        words = words.reshape(len(taken), 2)
        return words[:, 0].copy(), words[:, 1].copy(), np.arange(len(rows))
    if op_impl.name == _MINHASH:
        k0s, k1s, which = [], [], []
        with np.errstate(over="ignore"):
            for b, name in enumerate(op_impl.band_columns):
                # A row its key phase could not key has null bands (never looked up, never exported): read as 0,
                # since numpy would turn the whole column into floats around a null and round every digest.
                digest = pc.fill_null(keys.column(name), 0).combine_chunks().to_numpy().astype(np.uint64)[rows]
                k0s.append(mix64(digest + np.uint64(b) * GOLDEN_K1))
                k1s.append(np.full(len(rows), b, dtype=np.uint64))
                which.append(np.arange(len(rows)))
        if not k0s:
            empty = np.zeros(0, np.uint64)
            return empty, empty, np.zeros(0, np.int64)
        return np.concatenate(k0s), np.concatenate(k1s), np.concatenate(which)
    raise ValueError(f"{op_impl.name} cannot deduplicate against history")
