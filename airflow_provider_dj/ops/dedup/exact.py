"""Exact document deduplication with Data-Juicer 1.6.1's semantics.

DJ hashes a normalized text with md5 and keeps the first sample of each
hash.  Here ``compute_hash`` produces one 16-byte key per row (xxh3_128 of
the same normalized text: as good as md5 for equality, several times faster),
and the engine resolves duplicates globally, in input order, possibly with
``first_occurrence_mask`` below.
"""

from __future__ import annotations

from typing import Any, Sequence, Union

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_dj.ops.base import Deduplicator
from airflow_provider_dj.ops.kernels.text import (
    PUNCTUATION,
    REGEX_DIGIT,
    REGEX_SPACE,
    delete_chars,
    hash128,
    py_lower,
    py_strip,
    text_array,
)
from airflow_provider_dj.ops.registry import register

KEY_TYPE = pa.binary(16)
# DJ removes r"\s+|\d+|[<string.punctuation>]" with the regex module; deleting
# runs of a class or single members of it is the same as deleting every
# character of the union, with \s and \d as the regex module defines them.
NON_CHARACTERS = REGEX_SPACE | REGEX_DIGIT | PUNCTUATION


@register
class DocumentDeduplicator(Deduplicator):
    """Drop samples whose normalized text equals an earlier sample's.

    Normalization is DJ's, in DJ's order: ``lowercase`` applies Python's
    ``str.lower()`` (exactly, including final sigma and U+0130);
    ``ignore_non_character`` deletes whitespace, Unicode decimal digits and
    ASCII punctuation (non-ASCII punctuation such as "，" or "—" is kept);
    then the result is ``str.strip()``-ed, so texts differing only in leading
    or trailing whitespace are always duplicates.  A null text is keyed like
    '' (DJ would fail on it).
    """

    name = "document_deduplicator"

    def __init__(
        self,
        *,
        lowercase: bool = False,
        ignore_non_character: bool = False,
        text_key: str = "text",
        **common: Any,
    ) -> None:
        super().__init__(text_key=text_key, **common)
        self.lowercase = lowercase
        self.ignore_non_character = ignore_non_character

    def normalize(self, table: pa.Table) -> pa.Array:
        """The text each key is the hash of (exposed for tests and debugging)."""
        arr = pc.fill_null(text_array(table, self.text_key), "")
        if self.lowercase:
            arr = py_lower(arr)
        if self.ignore_non_character:
            arr = delete_chars(arr, NON_CHARACTERS)
        return py_strip(arr)

    def compute_hash(self, table: pa.Table) -> pa.Array:
        return hash128(self.normalize(table))


KeysLike = Union[pa.Array, pa.ChunkedArray, Sequence[Union[pa.Array, pa.ChunkedArray]]]


def _as_key_array(keys: KeysLike) -> pa.FixedSizeBinaryArray:
    if isinstance(keys, (pa.Array, pa.ChunkedArray)):
        parts = [keys]
    else:
        parts = list(keys)
    chunks: list[pa.Array] = []
    for part in parts:
        chunks.extend(part.chunks if isinstance(part, pa.ChunkedArray) else [part])
    if not chunks:
        return pa.array([], KEY_TYPE)
    for i, chunk in enumerate(chunks):
        if chunk.type != KEY_TYPE:
            if not (pa.types.is_binary(chunk.type) or pa.types.is_large_binary(chunk.type)):
                raise TypeError(f"dedup keys must be {KEY_TYPE}, got {chunk.type}")
            chunks[i] = chunk.cast(KEY_TYPE)  # e.g. read back as plain binary; checks the width
    return pa.chunked_array(chunks, KEY_TYPE).combine_chunks()


def first_occurrence_mask(keys: KeysLike) -> np.ndarray:
    """True at the first row holding each key, in the order given.

    ``keys`` is one array or a list of arrays (e.g. every partition's keys in
    input order).  The 16-byte keys are viewed as two uint64 columns and
    sorted with numpy's stable ``lexsort``; within each run of equal keys the
    first sorted row is then the earliest one.  O(n log n), no Python loop,
    memory about 40 bytes per key (keys, sort order, sorted copy) -- faster
    than a hash-based ``pc.index_in`` of the keys against themselves.
    """
    arr = _as_key_array(keys)
    n = len(arr)
    if n == 0:
        return np.zeros(0, dtype=bool)
    if arr.null_count:
        raise ValueError("dedup keys must not be null")
    words = np.frombuffer(arr.buffers()[1], dtype="<u8")[2 * arr.offset : 2 * (arr.offset + n)].reshape(n, 2)
    order = np.lexsort((words[:, 1], words[:, 0]))
    ordered = words[order]
    starts = np.ones(n, dtype=bool)
    starts[1:] = (ordered[1:] != ordered[:-1]).any(axis=1)
    mask = np.zeros(n, dtype=bool)
    mask[order[starts]] = True
    return mask
