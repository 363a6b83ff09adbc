"""A write-only file wrapper that counts and hashes (xxh3-128) what passes through it."""

from __future__ import annotations

import xxhash


class HashingWriter:
    """Forwards writes to ``fh`` and keeps their xxh3-128 (``h``) and byte count (``n``).

    ``tell``/``closed`` make it acceptable to pyarrow's Parquet writer."""

    def __init__(self, fh, h=None) -> None:
        self.fh = fh
        self.h = h if h is not None else xxhash.xxh3_128()
        self.n = 0

    def write(self, b) -> int:
        self.h.update(b)
        self.n += len(b)
        self.fh.write(b)
        return len(b)

    def count(self, b) -> None:
        """Hash and count bytes that reach the destination another way (a linked file)."""
        self.h.update(b)
        self.n += len(b)

    def flush(self) -> None:
        self.fh.flush()

    def tell(self) -> int:
        return self.n

    @property
    def closed(self) -> bool:
        return False


__all__ = ["HashingWriter"]
