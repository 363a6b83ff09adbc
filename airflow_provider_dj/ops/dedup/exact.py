"""Exact document deduplication with Data-Juicer 1.6.1's semantics.

DJ hashes a normalized text with md5 and keeps the first sample of each
hash.  Here ``compute_hash`` produces one 16-byte key per row (xxh3_128 of
the same normalized text: as good as md5 for equality, several times faster),
and the engine resolves duplicates globally, in input order, possibly with
``first_occurrence_mask`` (ops/kernels/keys.py).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_dj.ops.base import Deduplicator
from airflow_provider_dj.ops.kernels.keys import KEY_TYPE, KeysLike, first_occurrence_mask  # noqa: F401 - re-exported
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
