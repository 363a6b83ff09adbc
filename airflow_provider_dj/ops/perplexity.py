"""perplexity_filter: KenLM + SentencePiece perplexity, offline (issue 11)."""

from __future__ import annotations
