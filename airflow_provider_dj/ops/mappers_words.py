"""Word-level text mappers (remove_words_with_incorrect_substrings_mapper) (issue 11)."""

from __future__ import annotations
