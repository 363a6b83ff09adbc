"""Inputs of the LaTeX and word mappers' conformance fixtures: real LaTeX sources.

Hand-written documents (``PAPERS``, ``HEADER_CASES``, ...) each exercise a
rule of an op, with a comment on the tricky ones; ``generated_papers`` adds
seeded random documents assembled from the same kinds of parts (preambles
with \\newcommand/\\renewcommand/\\def, sections, comments, bibliographies,
CJK and accented prose), so combinations nobody thought of are compared too.
Pure Python: the generator (DJ venv) and nothing else imports this.
"""

from __future__ import annotations

import random

PREAMBLE = r"""\documentclass[11pt]{article}
\usepackage{amsmath,amssymb}
\usepackage[utf8]{inputenc}
\newcommand{\R}{\mathbb{R}}
\newcommand*{\eps}{\varepsilon}
\newcommand{\RR}{\R^n}
\newcommand{\norm}[1]{\left\lVert #1 \right\rVert}
\renewcommand{\vec}{\mathbf}
\def\foo{bar}
\def \spaced {two words}
\def\Lip{\mathrm{Lip}}% Lipschitz constant
"""

PAPER = (
    PREAMBLE
    + r"""\title{On the Convergence of Gradient Descent}
\author{A. Author \and B. Autor}
\begin{document}
\maketitle
\begin{abstract}
We study $\RR$ and show that $\eps$-stationary points exist. % TODO: sharpen
\end{abstract}
% This whole line is a comment.
\section{Introduction}\label{sec:intro}
Let $f:\R\to\R$ be smooth; 50\% of the mass lies in $[0,1]$.
The map \foo is \Lip{} and \foo, too.  See \cite{nesterov}.
%\section{Old introduction}
\subsection*{Notation}
We write $\norm{x}$ for the norm and \spaced. for the rest.
\section[Short]{A Longer Title
Over Two Lines}
Results follow.\\ A forced break.
\bibliographystyle{plain}
\bibliography{refs}
\end{document}
"""
)

PAPER_THEBIB = r"""\documentclass{amsart}
\newcommand{\N}{\mathbb{N}}
\begin{document}
\chapter{Counting}
Every $n\in\N$ has a successor.
\appendix
\section{Proofs}
Trivial.
\begin{thebibliography}{9}
\bibitem{peano} G. Peano, Arithmetices principia, 1889.
\end{thebibliography}
\end{document}
"""

PAPER_CJK = r"""\documentclass{ctexart}
\usepackage{xeCJK}
\newcommand{\zh}{中文}
\def\cafe{café}
\newcommand{\emo}{😀}
\begin{document}
% 这是一条注释
\section{引言}
本文研究\zh 排版。Ünïcödé text: naïve café, \cafe, \emo!
价格上涨了 30\% 左右。% 行内注释
\subsection{方法}
使用 \zh{} 与 \cafe.
\begin{references}
\bibitem{x} 张三，《排版》，2020。
\end{references}
\end{document}
"""

NO_SECTION = r"""\documentclass{article}
\begin{document}
Just a note without any sectioning command; $\partial{f}$ is not \part{}.
% a comment
\end{document}
"""

LONG_LINE = (
    r"\documentclass{article}\newcommand{\x}{\xi}"
    + "\n"
    + r"\begin{document}\section{Long}"
    + "\n"
    + " ".join(f"word{i} \\x, é中 50\\% %c{i}" if i % 97 == 0 else f"word{i} \\x," for i in range(1000))
    + "\n"
    + r"\bibliography{long}"
    + "\n"
)

PAPERS = [PAPER, PAPER_THEBIB, PAPER_CJK, NO_SECTION, LONG_LINE, "", "\n", "   "]

HEADER_CASES = [
    r"\section{A}",
    r"pre \section*{Starred} post",
    r"pre \section [x]{not a header: space} \section{Real}",
    r"\sectionmark{no} \sectioné{no} \subsection[a]b]{c} tail",  # [..] may run past a "]" to find "]{"
    r"\part{P} \paragraph{p} \subparagraph{s}",
    r"$\partial{f}$ then \subsubsection{Deep}",
    "\\section{Title without end",  # no closing brace: no header
    "\\section{Multi\nline\ntitle} body",
    "% \\section{commented}\n\\section{real}",
    "\\chapter*[short]{long}\r\nCRLF body\r\n",
    "Préambule ¿qué? \\section{Résumé} 中文",
]

COMMENT_CASES = [
    "% first line comment\nline two\n% middle comment\nline four % inline\nlast",
    "100\\% sure % but this goes\n\\%not a comment",
    "%\n%%\n%%% triple\nkept",
    "a%\nb% x\n%",
    "escaped backslash \\\\% stays? yes\n",
    "no percent at all",
    "trailing percent%",
    "CRLF % comment\r\nnext\r\n% line\r\nend",
    "中文注释 %这里是注释\n正文",
    "\n% after a newline at the start",
    "%x\n%y\n%\n%z",  # consecutive comment lines, a bare "%", the last line a comment
    "a \\%%x\nb%%\n\\%\n%",  # "\\%" never starts a comment, the "%" after it may
    "line\r\n%\r\nend",  # "%\r": the "\r" is the character after "%"
    "x" * 5000 + " % long " + "y" * 5000,
]

BIB_CASES = [
    "Body.\n\\bibliography{refs}\n",
    "Body \\bibliographystyle{plain} only style",
    "Body \\bibliography{unclosed",
    "Body \\bibliography{a}\nMore } later",
    "Body \\bibliography{a,\nb}\n",  # the braces may span lines (DOTALL)
    "Body \\bibliography{\n",  # ... but some "}" must follow
    "\\appendix",
    "A \\begin{REFERENCES} x \\appendix y",
    "A \\begin{references}\nB",
    "Before\n\\appendix\n\\section{App}",
    "\\begin{thebibliography}{1}\\bibitem{a} A.\\end{thebibliography}",
    "No bibliography here: \\begin{Thebibliography}",
    "中文正文\n\\begin{thebibliography}{9}\n\\bibitem{x} 作者\n\\end{thebibliography}\n",
]

MACRO_CASES = [
    "\\newcommand{\\a}{A}\n\\newcommand{\\ab}{AB}\n\\a \\ab \\abc \\a1 \\a",  # prefix names; \\a at the very end stays
    "\\newcommand{\\x}{X}\n\\x\\x\\x \\x.",  # back-to-back: the char after one match is the next backslash
    "\\def\\v{\\\\ and \\1 and \\g<0> and $}\n\\v.",  # template-looking values are literal
    "\\newcommand{\\d}{new}\n\\def\\d{def}\n\\d.",  # defined twice: \\def's value wins
    "\\newcommand{\\c}{a}\\newcommand{\\e}{b}\n\\c \\e",  # two on one line: only the last ends the line
    "\\newcommand{\\k}{v} % comment\n\\k.",  # closing brace not at end of line: not a definition
    "\\newcommand{\\p}{\\q}\n\\newcommand{\\q}{Q}\n\\p \\q",  # nested: \\p's value is expanded by \\q later
    "\\newcommand{\\q}{Q}\n\\newcommand{\\p}{\\q}\n\\p \\q",  # nested the other way round: \\q stays in \\p's value
    "\\newcommand{\\t}{tab\there}\n\\t.",
    "\\newcommand{\\br}{a{b}c}\n\\br.",
    "\\newcommand{\\f}[1]{#1}\n\\f{x}",  # arguments: not expanded
    "\\renewcommand{\\r}{R}\n\\r.",  # renewcommand: not read
    "\\def\\emoji{🎉 é 中}\n\\emoji!",
    "no macros \\here.",
    "\\def\n\\x{multi-line def}\n\\x.",  # \\s* spans the newline
    "\\newcommand{\\crlf}{v}\r\n\\crlf.\r\n",  # "}" followed by "\r": not at end of line
]

WORD_CASES = [
    "Visit http://example.com or www.example.org for more.",
    'See (https://arxiv.org/abs/1234.5678), "href=x" and //comment.',
    "Upper-case HTTP://X.COM stays; .COM stays; mail me at a@b.com please",
    "tabs\tand  double  spaces\n\n\nand empty lines\t\t\n",
    "中文 http://中文.com 网址 www.百度.com 结束",
    "\\url{https://github.com/x} \\href{http://a.b}{link} in LaTeX",
    "…www… «http» ***.com*** ///",
    "",
    "   ",
    "no url at all",
    " ".join(f"w{i} http://s{i}.com" for i in range(800)),
    "café naïve www façade",
]


def generated_papers(n: int = 40, seed: int = 11) -> list[str]:
    """Seeded random LaTeX documents built from the kinds of parts real arXiv sources have."""
    rnd = random.Random(seed)
    names = ["alpha", "Beta", "x", "RR", "eps", "cG", "ket", "zz", "A1", "nb"]
    values = ["\\mathbb{R}", "\\varepsilon", "x_1", "中", "é", "\\mathcal{G}", "|\\psi\\rangle", "a{b}", "\\\\", "$"]
    words = ["the", "model", "converges", "定理", "证明", "naïve", "Übung", "50\\%", "\\cite{k}", "$x^2$"]
    heads = ["section", "section*", "subsection", "chapter", "paragraph", "part", "subsubsection", "sectionx"]
    ends = [
        "\\bibliography{refs}",
        "\\begin{thebibliography}{9}\\bibitem{a} A.\\end{thebibliography}",
        "\\appendix\n\\section{Extra}",
        "\\begin{references}\nR\n\\end{references}",
        "",
    ]
    docs = []
    for _ in range(n):
        lines = ["\\documentclass{article}"]
        defined = rnd.sample(names, rnd.randint(0, 4))
        for name in defined:
            form = rnd.choice(
                [
                    "\\newcommand{{\\{n}}}{{{v}}}",
                    "\\newcommand*{{\\{n}}}{{{v}}}",
                    "\\def\\{n}{{{v}}}",
                    "\\def \\{n} {{{v}}}",
                    "\\renewcommand{{\\{n}}}{{{v}}}",
                    "\\newcommand{{\\{n}}}[1]{{#1{v}}}",
                ]
            )
            lines.append(form.format(n=name, v=rnd.choice(values)) + rnd.choice(["", "", " % note"]))
        lines.append("\\begin{document}")
        for _ in range(rnd.randint(0, 3)):
            if rnd.random() < 0.7:
                lines.append(f"\\{rnd.choice(heads)}{{{rnd.choice(words)} {rnd.choice(words)}}}")
            for _ in range(rnd.randint(1, 4)):
                sentence = " ".join(rnd.choice(words + [f"\\{m}" for m in defined] or words) for _ in range(8))
                if rnd.random() < 0.3:
                    sentence += " % " + rnd.choice(words)
                if rnd.random() < 0.15:
                    sentence = "%" + sentence
                lines.append(sentence)
        lines.append(rnd.choice(ends))
        lines.append("\\end{document}")
        docs.append("\n".join(lines) + rnd.choice(["\n", "", "\n\n"]))
    return docs


LATEX = PAPERS + generated_papers()
CASES: dict[str, list[str]] = {
    "remove_header_mapper": LATEX + HEADER_CASES,
    "remove_comments_mapper": LATEX + COMMENT_CASES,
    "remove_bibliography_mapper": LATEX + BIB_CASES,
    "expand_macro_mapper": LATEX + MACRO_CASES,
    "remove_words_with_incorrect_substrings_mapper": WORD_CASES + PAPERS,
}

#: Training text for the fixture SentencePiece model (tokenization variant).
SP_TRAINING_TEXT = WORD_CASES[:10] + [p for p in PAPERS if p.strip()] + generated_papers(20, seed=5)
