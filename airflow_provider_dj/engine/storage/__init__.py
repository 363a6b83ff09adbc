"""Bytes on a work dir: fsspec-backed file access, credentials, checkpoints and their writer."""
