"""A JSON Lines file with what an index must get right: blank and whitespace-only lines between rows
(not rows), multi-byte characters, rows of every length, and a last line without a newline."""

from __future__ import annotations

import random


def write_ragged_jsonl(path, rows: int, seed: int = 0, max_chars: int = 300) -> None:
    """``rows`` rows ``{"id": i, "t": "é" * n}`` (n up to ``max_chars``) and a last row ``{"id": "last"}``."""
    rnd = random.Random(seed)
    with open(path, "w") as fh:
        for i in range(rows):
            roll = rnd.random()
            if roll < 0.05:
                fh.write("\n")
            elif roll < 0.08:
                fh.write("   \t \r\n")
            fh.write('{"id": %d, "t": "%s"}\n' % (i, "é" * rnd.randint(0, max_chars)))
        fh.write('{"id": "last"}')  # no newline at the end
