"""``python -m airflow_provider_dj.engine.runner``'s exit status by what ``run_job`` raised: 2 for a
refusal before any work (a ``RefusedError``), 130 for a stop, 1 for any other failure."""

from __future__ import annotations

import pytest

from airflow_provider_dj import exceptions as E
from airflow_provider_dj.engine.runner import __main__ as driver
from airflow_provider_dj.engine.runner import local


@pytest.mark.parametrize(
    ("error", "status", "says"),
    [
        (E.RecipeError("r.yaml", "export_path", "not a path"), 2, "refused before any work: r.yaml: export_path"),
        (E.ResumeRefusedError("input_changed", "the input changed"), 2, "refused before any work (input_changed)"),
        (E.JobLockedError("job held by run x"), 2, "refused before any work: job held"),
        (E.WriteOutsideRootsError("/a/b", "/c/b", "/a"), 2, "refused before any work: /a/b resolves"),
        (E.InputError("no such file"), 2, "refused before any work: no such file"),
        (E.PartitionTooLargeError("partition 0 needs 9 GiB"), 2, "refused before any work: partition 0"),
        (E.JobStopped("stopped on request"), 130, "stopped on request"),
        (E.PartitioningError("more partitions than rows"), 1, "failed: PartitioningError"),
        (E.BarrierNotReachedError("segment 0 left partition 1 uncommitted"), 1, "failed: BarrierNotReachedError"),
        (RuntimeError("a bug"), 1, "failed: RuntimeError: a bug"),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, BaseException) else str(v),
)
def test_exit_status_by_error(monkeypatch, capsys, error, status, says):
    def refuse(*_a, **_kw):
        raise error

    monkeypatch.setattr(local, "run_job", refuse)
    assert driver.main(["recipe.yaml", "--job-id", "j1"]) == status
    assert says in capsys.readouterr().err
