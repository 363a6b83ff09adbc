"""Every figure a benchmark section writes goes through this package.

``chart`` (bench/report/svg.py) is the one plotting function: every SVG a
section draws is a list of panels handed to it.  The writers below are how a
section puts its figures on disk (JSON, text or Markdown tables, SVG), and
``md_table``/``gib`` are the formatting the tables share.  What is in each
section's report lives beside them:

* ``e2e``: the end-to-end run's summary, printed table and chart (``-m bench e2e``);
* ``gathered``: the gathered run's Markdown sections and chart (``-m bench all``);
* ``ops``: the per-op run's table and speed-up chart (``-m bench ops``);
* ``published``: docs/img/benchmarks.svg from the published table (``-m bench plot``).

Each is a pure function of a results dict (no measuring), so a report can be
re-rendered from an old results file and a unit test can pin it down.
"""

from __future__ import annotations

import json
import os

from bench.report.svg import chart

__all__ = ["chart", "gib", "md_table", "write_chart", "write_json", "write_text"]


def gib(nbytes: float | None) -> str:
    """Bytes as GiB with two decimals; ``-`` for nothing measured."""
    if not nbytes:
        return "-"
    return f"{nbytes / 2**30:.2f} GiB"


def md_table(header: list[str], rows: list[list[str]]) -> str:
    """A Markdown table, one line per row (cells already formatted)."""
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


def write_text(path: str, text: str) -> str:
    """``text`` to ``path`` (its folder created); returns the path."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)
    return path


def write_json(path: str, obj: object, indent: int = 2) -> str:
    """``obj`` as JSON (anything JSON cannot hold written as ``str``); returns the path."""
    return write_text(path, json.dumps(obj, indent=indent, default=str))


def write_chart(path: str, title: str, subtitle: str, panels: list[dict]) -> str:
    """The ``chart`` of ``panels`` to ``path``; returns the path."""
    return write_text(path, chart(title, subtitle, panels))
