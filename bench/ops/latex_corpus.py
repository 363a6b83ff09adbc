"""Deterministic arXiv-like LaTeX corpus for benchmarking the LaTeX ops.

The per-op benchmark's default corpus is web prose, on which the LaTeX
cleaners (remove_header/comments/bibliography, expand_macro) have nothing
to do; these rows are what they meet in an arXiv dump: a preamble with
``\\newcommand``/``\\def`` macros (some with arguments), a title block and
abstract, sections with prose that uses the macros, inline and whole-line
``%`` comments, escaped ``\\%``, equations, and a bibliography; a few rows
have no section at all, and a few carry CJK or accented text.  Same seed,
same rows: both sides of the benchmark read one file.
"""

from __future__ import annotations

import json
import os
import random

_WORDS = (
    "we show that the model converges under mild assumptions on the step size and the loss is smooth "
    "convex bounded gradient descent stochastic estimate theorem lemma proof follows from bound rate "
    "sample complexity optimal regret algorithm analysis experiments dataset baseline results"
).split()
_EXTRA = ["naïve", "café", "Übersicht", "定理", "证明", "模型", "50\\%", "\\cite{ref}", "$x^2$", "\\ref{eq:1}"]
_MACROS = [
    ("R", "\\mathbb{R}"),
    ("eps", "\\varepsilon"),
    ("E", "\\mathbb{E}"),
    ("cL", "\\mathcal{L}"),
    ("RR", "\\R^n"),
    ("prox", "\\operatorname{prox}"),
    ("tr", "\\mathrm{tr}"),
    ("KL", "D_{\\mathrm{KL}}"),
]
_HEADS = ["section", "subsection", "section*", "subsubsection", "paragraph"]


def _sentence(rng: random.Random, macros: list[str]) -> str:
    words = [rng.choice(_WORDS) for _ in range(rng.randint(6, 16))]
    if macros and rng.random() < 0.6:
        words.insert(rng.randrange(len(words)), f"$\\{rng.choice(macros)}$")
    if rng.random() < 0.2:
        words.insert(rng.randrange(len(words)), rng.choice(_EXTRA))
    text = " ".join(words).capitalize() + "."
    return text + (f" % {rng.choice(_WORDS)} {rng.choice(_WORDS)}" if rng.random() < 0.1 else "")


def make_doc(rng: random.Random) -> str:
    chosen = rng.sample(_MACROS, rng.randint(0, 5))
    lines = ["\\documentclass[11pt]{article}", "\\usepackage{amsmath,amssymb}"]
    for name, value in chosen:
        lines.append(
            rng.choice(["\\newcommand{{\\{}}}{{{}}}", "\\def\\{}{{{}}}", "\\newcommand*{{\\{}}}{{{}}}"]).format(
                name, value
            )
        )
    if rng.random() < 0.5:
        lines.append("\\newcommand{\\norm}[1]{\\left\\lVert #1 \\right\\rVert}")
    lines += [
        "% arXiv submission, do not distribute",
        "\\begin{document}",
        "\\title{On " + rng.choice(_WORDS) + "}",
        "\\maketitle",
        "\\begin{abstract}",
        " ".join(_sentence(rng, [n for n, _ in chosen]) for _ in range(3)),
        "\\end{abstract}",
    ]
    names = [n for n, _ in chosen]
    with_sections = rng.random() > 0.05
    for s in range(rng.randint(1, 4)):
        if with_sections:
            lines.append(f"\\{rng.choice(_HEADS)}{{{rng.choice(_WORDS).capitalize()} {s}}}")
        for _ in range(rng.randint(1, 3)):
            lines.append(" ".join(_sentence(rng, names) for _ in range(rng.randint(2, 5))))
            if rng.random() < 0.2:
                lines.append("%" + _sentence(rng, names))
        if rng.random() < 0.3:
            lines += ["\\begin{equation}", "  f(x) = \\sum_{i=1}^n x_i^2", "\\end{equation}"]
    end = rng.random()
    if end < 0.4:
        lines += ["\\bibliographystyle{plain}", "\\bibliography{refs}"]
    elif end < 0.7:
        lines += ["\\begin{thebibliography}{9}", "\\bibitem{ref} A. Author. A paper. 2020.", "\\end{thebibliography}"]
    elif end < 0.8:
        lines += ["\\appendix", "\\section{Proofs}", _sentence(rng, names)]
    lines.append("\\end{document}")
    return "\n".join(lines) + "\n"


def write_latex_corpus(path: str, n: int, seed: int = 42) -> str:
    """Write ``n`` rows ``{"id", "text"}`` to ``path`` (JSON Lines), atomically."""
    rng = random.Random(seed)
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        for i in range(n):
            f.write(json.dumps({"id": i, "text": make_doc(rng)}, ensure_ascii=False) + "\n")
    os.replace(tmp, path)
    return path
