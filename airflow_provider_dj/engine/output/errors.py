"""Why an export refuses to write: the rows do not add up, or a partition's final output is missing.

Both stop the job before a byte of the export is written (a job that would export garbage stops loudly).
"""

from __future__ import annotations

from airflow_provider_dj.core.errors import DJError


class AccountingError(DJError, RuntimeError):
    """Rows appeared or vanished between ops: the job must not export."""


class MissingFinalCheckpointError(DJError, RuntimeError):
    """A partition has no committed (or an unreadable) final checkpoint: clear its task to recompute it."""


class ExportMismatchError(DJError, RuntimeError):
    """An export file is not the one recorded: its bytes or row count differ from what its producer (the
    job summary, or the Asset event) announced.  Nothing is rewritten."""
