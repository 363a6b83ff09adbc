"""``image_deduplicator`` with Data-Juicer 1.6.1's semantics, as a native global op.

DJ's op hashes each row's images with ``imagededup`` (``method``: ``phash`` by default, ``dhash``,
``whash`` or ``ahash``), concatenates the 16-hex-digit hashes of the row's distinct paths in order
of first appearance (a path named twice in a row counts once), and keeps the first row of each
concatenation.  With ``consider_text`` the row's ``document_deduplicator`` text hash is part of the
identity too (its ``lowercase`` / ``ignore_non_character`` arguments, which DJ forwards to it).

Rows without images (the field absent, null or ``[]``): DJ never removes them -- unless
``consider_text``, where its identity ``("", text hash)`` is not empty and such rows are
deduplicated on their text alone.  Both are kept here: without ``consider_text`` such a row's key is
null, which the global step treats as "never a duplicate" (ops/kernels/keys.py).

``compute_hash`` returns one 16-byte key per row: xxh3_128 of the concatenated hash string (with
``consider_text``, of that string, a NUL and the 16-byte text key: hex digits never hold a NUL, so
distinct pairs never collide by concatenation).  The engine keeps each key's first row in input
order over all partitions, so the result does not depend on the partitioning.  The hashes are
``ops/kernels/image_hash.py``'s, bit for bit imagededup's; images are read by
``ops/kernels/images.py``'s ``open_image``, as DJ's ``load_image`` reads them.

An image that cannot be read (missing, not an image, truncated: a truncated file is an error here,
where DJ's import makes Pillow fill it in) raises ``ImageReadError`` naming the path.  Under
``skip_op_error`` the engine's key phase narrows the slice down to that row, which goes to
``failed/`` with the reason (DJ drops it silently); otherwise the job fails, naming the file
(engine/execution/key_rows.py).

Not supported, as in the native image filters: images stored as bytes (``image_bytes``); a table
holding them fails the op with a message saying so.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import xxhash

from airflow_provider_dj.ops.base import Deduplicator, OpArgumentError
from airflow_provider_dj.ops.dedup.exact import DocumentDeduplicator
from airflow_provider_dj.ops.kernels.image_hash import METHODS, image_hashes
from airflow_provider_dj.ops.kernels.image_lists import op_image_lists
from airflow_provider_dj.ops.kernels.images import open_image, pillow_missing
from airflow_provider_dj.ops.kernels.keys import KEY_TYPE
from airflow_provider_dj.ops.registry import register

#: Images decoded and hashed together (their thumbnails are stacked; whash's are 64 KiB each).
_HASH_CHUNK = 256
#: How many paths' hashes an op instance remembers.
_MEMO_LIMIT = 1 << 16


@register
class ImageDeduplicator(Deduplicator):
    """Drop rows whose images (and, with ``consider_text``, text) hash like an earlier row's."""

    name = "image_deduplicator"

    def __init__(
        self,
        *,
        method: str = "phash",
        consider_text: bool = False,
        lowercase: bool = False,
        ignore_non_character: bool = False,
        image_key: str = "images",
        text_key: str = "text",
        **common: Any,
    ) -> None:
        super().__init__(text_key=text_key, **common)
        if method not in METHODS:
            raise OpArgumentError("method", _method_message(method))
        self.method = method
        self.consider_text = consider_text
        self.image_key = image_key
        self.text_dedup = (
            DocumentDeduplicator(lowercase=lowercase, ignore_non_character=ignore_non_character, text_key=text_key)
            if consider_text
            else None
        )
        self._memo: dict[str, str] = {}

    @classmethod
    def check_values(cls, args: dict[str, Any]) -> None:
        method = args.get("method", "phash")
        if method not in METHODS:
            raise OpArgumentError("method", _method_message(method))
        missing = pillow_missing(cls.name)
        if missing:
            raise OpArgumentError("image_key", missing)

    @classmethod
    def input_fields(cls, args: dict[str, Any], text_key: str) -> dict[str, str]:
        """The text key with ``consider_text``; never the image field: rows without it are kept, as in DJ."""
        if not args.get("consider_text"):
            return {}
        return super().input_fields(args, text_key)

    def image_hash_strings(self, table: pa.Table) -> list[str]:
        """Per row, DJ's ``imagehash``: the concatenated hashes of its distinct paths ('' without images)."""
        lists = op_image_lists(table, self.name, self.image_key, self.common_args.get("image_bytes_key"))
        self._hash_paths([p for p in dict.fromkeys(lists.paths) if p not in self._memo])
        per_row: list[dict[str, None]] = [{} for _ in range(table.num_rows)]
        for path, row in zip(lists.paths, lists.row_of.tolist()):
            per_row[row][path] = None
        return ["".join(self._memo[p] for p in paths) for paths in per_row]

    def _hash_paths(self, paths: list[str]) -> None:
        if len(self._memo) + len(paths) > _MEMO_LIMIT:
            self._memo.clear()
        for start in range(0, len(paths), _HASH_CHUNK):
            chunk = paths[start : start + _HASH_CHUNK]
            self._memo.update(zip(chunk, image_hashes((open_image(p) for p in chunk), self.method)))

    def compute_hash(self, table: pa.Table) -> pa.Array:
        strings = self.image_hash_strings(table)
        if self.text_dedup is not None:
            text_keys = self.text_dedup.compute_hash(table).to_pylist()
            digests = [xxhash.xxh3_128_digest(s.encode() + b"\0" + t) for s, t in zip(strings, text_keys)]
        else:
            digests = [xxhash.xxh3_128_digest(s.encode()) if s else None for s in strings]
        return pa.array(digests, KEY_TYPE)


def _method_message(method: Any) -> str:
    return f"image_deduplicator: method must be one of {', '.join(METHODS)}, got {method!r}"
