"""The published end-to-end chart, docs/img/benchmarks.svg (``python -m bench plot``).

Drawn by ``bench.report.chart`` like every other chart.  Where the figures
come from:

* by default, the "Results (as printed)" table in docs/benchmarks.md: the
  published figures, which the chart must show (tests/unit/
  test_generated_docs.py checks the committed SVG against that table);
* with ``--json [FILE]``, a result file that ``python -m bench e2e`` wrote
  (``summary.per_size``; the newest ``bench/results/bench_*.json`` when no
  FILE is given), e.g. to look at a new run before publishing it.

Values are rounded as the printed table rounds them (seconds to 0.1, GiB to
0.01), so both sources draw the same chart for the same run.

    .venv/bin/python -m bench plot                         # docs/img/benchmarks.svg
    .venv/bin/python -m bench plot --json --out /tmp/new.svg
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import sys
from dataclasses import dataclass

from bench._proc import REPO as ROOT
from bench.report import chart, write_text

DOC = os.path.join(ROOT, "docs", "benchmarks.md")
OUT = os.path.join(ROOT, "docs", "img", "benchmarks.svg")
OURS_COLOR, DJ_COLOR = "#2b7bb9", "#d9822b"


@dataclass(frozen=True)
class SizePoint:
    rows: int
    ours_s: float
    dj_s: float
    ours_pss_gib: float
    dj_pss_gib: float


@dataclass(frozen=True)
class BenchFigures:
    label: str  # what was measured, when
    points: tuple[SizePoint, ...]


class NoFiguresError(ValueError):
    """Neither a results JSON nor the docs table gave any figures."""


# --------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------
_ROW = re.compile(
    r"^\s*(?P<rows>\d+)\s*\|\s*(?P<ours>[\d.]+)\s*\|\s*(?P<dj>[\d.]+)\s*\|.*?"
    r"\|\s*[\d.]+ GiB \((?P<ours_pss>[\d.]+)\)\s*\|\s*[\d.]+ GiB \((?P<dj_pss>[\d.]+)\)\s*\|"
)
RESULTS_HEADING = "## Results (as printed)"
_TITLE = re.compile(r"^(dj-airflow vs Data-Juicer[^\n]*?)\s+-\s+(\S+)\s*$", re.M)


def figures_from_markdown(text: str, source: str = DOC) -> BenchFigures:
    """Parse the printed per-size table (rows | ours s | DJ s | ... | peak RSS (PSS) ...).

    Only the "Results (as printed)" section is read when the page has one,
    so other tables on the page can never leak into the chart."""
    if RESULTS_HEADING in text:
        text = text.split(RESULTS_HEADING, 1)[1].split("\n## ", 1)[0]
    points = []
    for line in text.splitlines():
        m = _ROW.match(line)
        if m:
            points.append(
                SizePoint(int(m["rows"]), float(m["ours"]), float(m["dj"]), float(m["ours_pss"]), float(m["dj_pss"]))
            )
    if not points:
        raise NoFiguresError(f"{source}: no per-size result rows ('rows | ours s | DJ s | ...') found")
    t = _TITLE.search(text)
    label = f"{t.group(1)}, {t.group(2)[:10]}" if t else "dj-airflow vs Data-Juicer"
    return BenchFigures(label, tuple(sorted(points, key=lambda p: p.rows)))


def figures_from_json(data: dict, source: str) -> BenchFigures:
    """Read ``summary.per_size`` of an e2e result file, rounded like the printed table."""
    rows = (data.get("summary") or {}).get("per_size") or []
    points = []
    for r in rows:
        if r.get("ours_wall_s") is None or r.get("dj_wall_s") is None or r.get("ours_error") or r.get("dj_error"):
            continue  # a failed run has no comparable bar
        points.append(
            SizePoint(
                int(r["rows"]),
                round(r["ours_wall_s"], 1),
                round(r["dj_wall_s"], 1),
                round((r.get("ours_peak_tree_pss") or 0) / 2**30, 2),
                round((r.get("dj_peak_tree_pss") or 0) / 2**30, 2),
            )
        )
    if not points:
        raise NoFiguresError(f"{source}: summary.per_size has no size where both runs succeeded")
    label = f"dj-airflow vs Data-Juicer 1.6.1 (default executor), {str(data.get('timestamp', ''))[:10]}"
    return BenchFigures(label, tuple(sorted(points, key=lambda p: p.rows)))


def newest_results_json(results_dir: str = os.path.join(ROOT, "bench", "results")) -> str | None:
    files = sorted(glob.glob(os.path.join(results_dir, "bench_*.json")))
    return files[-1] if files else None


# --------------------------------------------------------------------------
# Drawing
# --------------------------------------------------------------------------
def _human_rows(n: int) -> str:
    return (
        f"{n // 1_000_000}M"
        if n >= 1_000_000 and n % 1_000_000 == 0
        else (f"{n // 1000}k" if n >= 1000 and n % 1000 == 0 else str(n))
    )


SERIES = [
    ("ours", "dj-airflow (this provider)", OURS_COLOR),
    ("dj", "Data-Juicer 1.6.1 default executor", DJ_COLOR),
]


def panels(fig: BenchFigures) -> list[dict]:
    """Wall time and peak PSS per size, our bar beside Data-Juicer's."""
    return [
        {
            "title": "Wall time, launch to exit (lower is better)",
            "unit": " s",
            "fmt": "{:.1f}",
            "series": SERIES,
            "bars": [(f"{_human_rows(p.rows)} rows", (p.ours_s, p.dj_s)) for p in fig.points],
        },
        {
            "title": "Peak memory, process tree PSS (lower is better)",
            "unit": " GiB",
            "fmt": "{:.2f}",
            "series": SERIES,
            "bars": [(f"{_human_rows(p.rows)} rows", (p.ours_pss_gib, p.dj_pss_gib)) for p in fig.points],
        },
    ]


def render_svg(fig: BenchFigures) -> str:
    return chart(fig.label, "wall time and peak memory per input size, same corpus and ops for both", panels(fig))


def load_figures(json_path: str | None = None) -> tuple[BenchFigures, str]:
    """The docs table, or (``json_path`` given; ``"newest"`` = the newest result file) an e2e result."""
    if json_path:
        path = newest_results_json() if json_path == "newest" else json_path
        if not path:
            raise NoFiguresError("no bench/results/bench_*.json here: run python -m bench e2e or name a file")
        with open(path, encoding="utf-8") as fh:
            return figures_from_json(json.load(fh), path), path
    with open(DOC, encoding="utf-8") as fh:
        return figures_from_markdown(fh.read(), DOC), DOC


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--json",
        nargs="?",
        const="newest",
        metavar="FILE",
        help="draw a bench_*.json written by python -m bench e2e (no FILE: the newest) instead of "
        "the table in docs/benchmarks.md",
    )
    ap.add_argument("--out", default=OUT)
    args = ap.parse_args(argv)
    try:
        fig, source = load_figures(args.json)
    except (NoFiguresError, OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    write_text(args.out, render_svg(fig))
    print(f"wrote {args.out} ({len(fig.points)} sizes, from {os.path.relpath(source, ROOT)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
