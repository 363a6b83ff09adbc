"""A job's durable state on its work dir: checkpoints (whole and delta, commit markers) and their
background writer, the JSONL encoding, the global ops' keys and masks, where a partition resumes,
the index of reusable checkpoints, and one job's state read back lazily (``context``)."""
