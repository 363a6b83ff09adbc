"""Deduplication against history: the versioned on-disk index of earlier exports' dedup keys (``index``),
the version a job pins (``pin``), the lookup in the global step (``lookup``) and the commit after export
(``commit``).  See docs/nightly.md#deduplication-against-history."""
