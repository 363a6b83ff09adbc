"""The bottom layer, importable by every other: file access on local paths and object stores,
its credentials, the exception base, and what the host process (Airflow) lends the engine."""
