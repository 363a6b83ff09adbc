"""Deduplicators: exact and near-duplicate removal, with a global phase across partitions."""
