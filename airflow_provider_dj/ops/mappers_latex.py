"""LaTeX cleaners of Data-Juicer's arXiv recipe (issue 11)."""

from __future__ import annotations
