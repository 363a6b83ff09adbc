"""The one plotting function of the benchmarks: ``chart``, panels of horizontal bars as an SVG string.

Why hand-written SVG: matplotlib is not a dependency of this project, and a
chart for the docs must not depend on what happens to be installed.  The
SVG is plain text, so a committed chart diffs, and GitHub renders it inline.
Every chart a section draws (the end-to-end run, the gathered run, the
per-op run, the published docs/img/benchmarks.svg) is a list of panels
given to ``chart``, so they all look alike and a fix to one fixes all.

A panel is a dict:

* ``title``; ``bars``: ``[(label, value or None), ...]`` (None: drawn as
  "n/a"), or, with ``series``, ``[(label, (value, value, ...)), ...]``;
* ``series`` (optional): ``[(css_class, legend_label, colour), ...]``, one
  per value of a bar: the bars of one label are grouped, each rect carries
  ``class=css_class``, and the panel gets a legend;
* optional ``unit`` (appended to each printed value), ``fmt`` (a
  ``str.format`` spec, default ``"{:,.2f}"``), ``log`` (log scale, e.g.
  speed-ups spanning 0.5x..500x), ``ref`` (a reference line, e.g. the aim)
  and ``ref_label``.

Each bar's rect carries ``data-value`` (the value drawn) and a ``<title>``
tooltip, so a test can read the chart back.
"""

from __future__ import annotations

import math
from html import escape

WIDTH = 820
LABEL_W = 250
VALUE_W = 90
BAR_H = 16
GAP = 5
PANEL_TOP = 34
PANEL_BOTTOM = 18
PLOT_W = WIDTH - LABEL_W - VALUE_W - 20
COLORS = ("#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#b279a2", "#9d755d")


def _scale(values: list[float], log: bool, ref: float | None):
    """Map a value to an x offset (0..PLOT_W) and return (fn, x of zero)."""
    pts = [v for v in values if v is not None] + ([ref] if ref is not None else [])
    if log:
        pos = [v for v in pts if v > 0] or [1.0]
        lo, hi = math.log10(min(pos + [1.0])), math.log10(max(pos + [1.0]))
        lo, hi = math.floor(lo), math.ceil(hi) if hi > lo else lo + 1

        def fx(v: float) -> float:
            return (math.log10(max(v, 10**lo)) - lo) / (hi - lo) * PLOT_W

        return fx, fx(1.0)
    lo, hi = min(pts + [0.0]), max(pts + [0.0])
    if hi == lo:
        hi = lo + 1.0

    def fx(v: float) -> float:
        return (v - lo) / (hi - lo) * PLOT_W

    return fx, fx(0.0)


def _rows(p: dict) -> list[tuple[str, str, str, float | None, str]]:
    """One entry per drawn bar: (label shown, css class, colour, value, tooltip label)."""
    series = p.get("series")
    colors = p.get("colors", COLORS)
    out = []
    for i, (label, v) in enumerate(p["bars"]):
        if not series:
            out.append((str(label), "", colors[i % len(colors)], v, str(label)))
            continue
        for k, ((cls, name, color), sv) in enumerate(zip(series, v)):
            out.append((str(label) if k == 0 else "", cls, color, sv, f"{label} {name}"))
    return out


def _panel(p: dict, y0: float) -> tuple[list[str], float]:
    out = [f'<text x="10" y="{y0 + 20:.0f}" class="t">{escape(p["title"])}</text>']
    if not p["bars"]:
        out.append(f'<text x="{LABEL_W}" y="{y0 + PANEL_TOP + 12:.0f}" class="n">not measured</text>')
        return out, y0 + PANEL_TOP + BAR_H + PANEL_BOTTOM
    rows = _rows(p)
    fx, x0 = _scale([v for *_, v, _ in rows], p.get("log", False), p.get("ref"))
    fmt, unit = p.get("fmt", "{:,.2f}"), p.get("unit", "")
    y = y0 + PANEL_TOP
    for i, (label, cls, color, v, tip) in enumerate(rows):
        if p.get("series") and label and i:
            y += GAP  # a little more room between groups
        if label:
            out.append(f'<text x="{LABEL_W - 6}" y="{y + BAR_H - 4:.0f}" class="l">{escape(label)}</text>')
        if v is None:
            out.append(f'<text x="{LABEL_W + x0 + 4:.0f}" y="{y + BAR_H - 4:.0f}" class="n">n/a</text>')
        else:
            x1 = fx(v)
            left, w = min(x0, x1), abs(x1 - x0)
            shown = f"{fmt.format(v)}{unit}"
            cls_attr = f' class="{cls}"' if cls else ""
            out.append(
                f'<rect x="{LABEL_W + left:.1f}" y="{y:.0f}" width="{max(w, 1):.1f}" height="{BAR_H}" '
                f'fill="{color}"{cls_attr} data-value="{v:g}"><title>{escape(tip)}: {escape(shown)}</title></rect>'
            )
            out.append(
                f'<text x="{LABEL_W + max(x0, x1) + 4:.0f}" y="{y + BAR_H - 4:.0f}" class="v">{escape(shown)}</text>'
            )
        y += BAR_H + GAP
    axis_top, axis_bottom = y0 + PANEL_TOP - 3, y
    out.append(
        f'<line x1="{LABEL_W + x0:.1f}" y1="{axis_top:.0f}" x2="{LABEL_W + x0:.1f}" y2="{axis_bottom:.0f}" class="ax"/>'
    )
    notes = []
    if p.get("ref") is not None:
        xr = LABEL_W + fx(p["ref"])
        out.append(f'<line x1="{xr:.1f}" y1="{axis_top:.0f}" x2="{xr:.1f}" y2="{axis_bottom:.0f}" class="ref"/>')
        out.append(
            f'<text x="{xr + 3:.1f}" y="{axis_bottom + 12:.0f}" class="n">{escape(p.get("ref_label", "aim"))}</text>'
        )
    if p.get("log"):
        notes.append("log scale")
    for k, note in enumerate(notes):
        out.append(f'<text x="{LABEL_W}" y="{axis_bottom + 12 * (k + 1):.0f}" class="n">{escape(note)}</text>')
    bottom = axis_bottom + PANEL_BOTTOM
    if p.get("series"):
        x = LABEL_W
        for _cls, name, color in p["series"]:
            out.append(f'<rect x="{x}" y="{bottom - 10:.0f}" width="10" height="10" fill="{color}" class="key"/>')
            out.append(f'<text x="{x + 14}" y="{bottom:.0f}" class="n">{escape(name)}</text>')
            x += 24 + 6 * len(name)
        bottom += 12
    return out, bottom


def chart(title: str, subtitle: str, panels: list[dict]) -> str:
    """The SVG document of ``panels`` (see the module docstring) stacked under a title and a subtitle."""
    body: list[str] = [
        f'<text x="10" y="22" class="h">{escape(title)}</text>',
        f'<text x="10" y="40" class="n">{escape(subtitle)}</text>',
    ]
    y = 48.0
    for p in panels:
        lines, y = _panel(p, y)
        body += lines
    height = int(y + 10)
    style = (
        "<style>text{font-family:sans-serif;fill:#222}.h{font-size:16px;font-weight:bold}"
        ".t{font-size:13px;font-weight:bold}.l{font-size:11px;text-anchor:end}.v{font-size:11px}"
        ".n{font-size:10px;fill:#666}.ax{stroke:#333;stroke-width:1}"
        ".ref{stroke:#d62728;stroke-width:1.2;stroke-dasharray:4 3}</style>"
    )
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}">{style}<rect width="100%" height="100%" fill="white"/>'
        + "".join(body)
        + "</svg>\n"
    )
