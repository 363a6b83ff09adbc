"""A full disk while appending a progress log line names the log file (not a bare Errno 28) and keeps the file whole."""

from __future__ import annotations

import os

import pytest

from airflow_provider_dj.core import fs as storage
from airflow_provider_dj.engine.jobdir import progress_log


def test_full_disk_on_a_progress_line_names_the_file_and_keeps_earlier_lines(tmp_path, monkeypatch):
    path = progress_log.partition_log_path(str(tmp_path), 3)
    progress_log.append_line(path, "op 0 done")
    before = open(path, "rb").read()
    monkeypatch.setenv(storage.ENOSPC_SEAM_ENV, os.path.basename(path))  # the fault seam: a full disk there
    with pytest.raises(storage.StorageFullError) as err:
        progress_log.append_line(path, "op 1 done")
    assert path in str(err.value) and "progress log" in str(err.value)
    assert open(path, "rb").read() == before  # nothing torn, nothing lost
    monkeypatch.delenv(storage.ENOSPC_SEAM_ENV)
    progress_log.append_line(path, "op 1 done")
    assert open(path, encoding="utf-8").read().splitlines()[-1].endswith("op 1 done")
