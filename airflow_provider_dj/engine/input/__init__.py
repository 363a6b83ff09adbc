"""The input: sources, row indexing, exact partitions and their content hashes."""
