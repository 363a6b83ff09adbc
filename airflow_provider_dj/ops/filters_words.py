"""flagged_words_filter and stopwords_filter: Data-Juicer's word-list filters (issue 11)."""

from __future__ import annotations
