"""Draw the end-to-end benchmark as an SVG bar chart: docs/img/benchmarks.svg.

Why hand-written SVG: matplotlib is not a dependency of this project and a
chart of a dozen bars does not justify one.  The SVG is plain text, so it
diffs, and GitHub renders it inline in docs/benchmarks.md.

Where the figures come from:

* by default, the "Results (as printed)" table in docs/benchmarks.md: the
  published figures, which the chart must show (tests/unit/
  test_generated_docs.py checks the committed SVG against that table);
* with ``--json [FILE]``, a result file that ``bench/run_bench.py`` wrote
  (``summary.per_size``; the newest ``bench/results/bench_*.json`` when no
  FILE is given), e.g. to look at a new run before publishing it.

Values are rounded as the printed table rounds them (seconds to 0.1, GiB to
0.01), so both sources draw the same chart for the same run.

    .venv/bin/python bench/plot_results.py                         # docs/img/benchmarks.svg
    .venv/bin/python bench/plot_results.py --json --out /tmp/new.svg
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import sys
from dataclasses import dataclass
from xml.sax.saxutils import escape

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
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
    """Read ``summary.per_size`` of a run_bench.py result, rounded like the printed table."""
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
def _nice_max(v: float) -> float:
    """A round axis maximum at or above v (1, 2, 2.5, 5 x 10^k)."""
    if v <= 0:
        return 1.0
    exp = 10 ** (len(str(int(v))) - 1) if v >= 1 else 0.1
    for m in (1, 2, 2.5, 5, 10):
        if m * exp >= v:
            return m * exp
    return 10 * exp  # pragma: no cover


def _human_rows(n: int) -> str:
    return (
        f"{n // 1_000_000}M"
        if n >= 1_000_000 and n % 1_000_000 == 0
        else (f"{n // 1000}k" if n >= 1000 and n % 1000 == 0 else str(n))
    )


def _panel(x0: float, title: str, unit: str, pairs: list[tuple[str, float, float]], fmt: str) -> list[str]:
    """One grouped bar panel: per label, our bar then Data-Juicer's, values printed on top."""
    w, h, top, left = 400.0, 240.0, 70.0, 50.0
    base = top + h
    vmax = _nice_max(max(max(a, b) for _, a, b in pairs))
    out = [f'<text x="{x0 + left + w / 2:.1f}" y="{top - 22:.1f}" class="panel">{escape(title)}</text>']
    for i in range(5):  # grid lines and axis labels
        v = vmax * i / 4
        y = base - h * i / 4
        out.append(f'<line x1="{x0 + left:.1f}" y1="{y:.1f}" x2="{x0 + left + w:.1f}" y2="{y:.1f}" class="grid"/>')
        out.append(f'<text x="{x0 + left - 6:.1f}" y="{y + 4:.1f}" class="axis" text-anchor="end">{v:g}</text>')
    out.append(
        f'<text x="{x0 + 14:.1f}" y="{top + h / 2:.1f}" class="axis" '
        f'transform="rotate(-90 {x0 + 14:.1f} {top + h / 2:.1f})" text-anchor="middle">{escape(unit)}</text>'
    )
    group_w = w / len(pairs)
    bar_w = min(48.0, group_w / 3)
    for g, (label, ours, dj) in enumerate(pairs):
        cx = x0 + left + group_w * (g + 0.5)
        for k, (value, cls) in enumerate(((ours, "ours"), (dj, "dj"))):
            bh = h * value / vmax
            bx = cx - bar_w + k * bar_w
            out.append(
                f'<rect x="{bx:.1f}" y="{base - bh:.1f}" width="{bar_w - 2:.1f}" height="{bh:.1f}" '
                f'class="{cls}" data-value="{value:g}"><title>{escape(label)} {cls}: '
                f"{value:{fmt}} {escape(unit)}</title></rect>"
            )
            out.append(
                f'<text x="{bx + (bar_w - 2) / 2:.1f}" y="{base - bh - 4:.1f}" class="val" '
                f'text-anchor="middle">{value:{fmt}}</text>'
            )
        out.append(
            f'<text x="{cx:.1f}" y="{base + 18:.1f}" class="axis" text-anchor="middle">{escape(label)} rows</text>'
        )
    return out


def render_svg(fig: BenchFigures) -> str:
    wall = [(_human_rows(p.rows), p.ours_s, p.dj_s) for p in fig.points]
    mem = [(_human_rows(p.rows), p.ours_pss_gib, p.dj_pss_gib) for p in fig.points]
    width, height = 960, 380
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="Helvetica, Arial, sans-serif">',
        "<style>.grid{stroke:#ddd;stroke-width:1}.axis{font-size:12px;fill:#444}"
        ".val{font-size:11px;fill:#222}.panel{font-size:14px;font-weight:bold;text-anchor:middle;fill:#222}"
        f".ours{{fill:{OURS_COLOR}}}.dj{{fill:{DJ_COLOR}}}.title{{font-size:15px;fill:#111}}"
        ".legend{font-size:12px;fill:#222}</style>",
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="{width / 2}" y="22" class="title" text-anchor="middle">{escape(fig.label)}</text>',
    ]
    parts += _panel(10, "Wall time, launch to exit (lower is better)", "seconds", wall, ".1f")
    parts += _panel(490, "Peak memory, process tree PSS (lower is better)", "GiB", mem, ".2f")
    ly = height - 18
    parts += [
        f'<rect x="330" y="{ly - 10}" width="12" height="12" class="ours"/>',
        f'<text x="348" y="{ly}" class="legend">dj-airflow (this provider)</text>',
        f'<rect x="530" y="{ly - 10}" width="12" height="12" class="dj"/>',
        f'<text x="548" y="{ly}" class="legend">Data-Juicer 1.6.1 default executor</text>',
        "</svg>",
    ]
    return "\n".join(parts) + "\n"


def load_figures(json_path: str | None = None) -> tuple[BenchFigures, str]:
    """The docs table, or (``json_path`` given; ``"newest"`` = the newest result file) a run_bench.py result."""
    if json_path:
        path = newest_results_json() if json_path == "newest" else json_path
        if not path:
            raise NoFiguresError("no bench/results/bench_*.json here: run bench/run_bench.py or name a file")
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
        help="draw a bench_*.json written by bench/run_bench.py (no FILE: the newest) instead of "
        "the table in docs/benchmarks.md",
    )
    ap.add_argument("--out", default=OUT)
    args = ap.parse_args(argv)
    try:
        fig, source = load_figures(args.json)
    except (NoFiguresError, OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as fh:
        fh.write(render_svg(fig))
    print(f"wrote {args.out} ({len(fig.points)} sizes, from {os.path.relpath(source, ROOT)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
