"""language_id_score_filter: fastText language identification, offline (issue 11)."""

from __future__ import annotations
