"""ReviewOperator's answers (operators/review.py): approve, reject and a timeout's default, each recorded
as a ``review_answered`` event, on a real job directory; Airflow's resume events as the scheduler sends them."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from airflow_provider_dj.engine.job.review import ReviewRejectedError, decide_review
from airflow_provider_dj.engine.jobdir.events import read_events
from tests.unit.engine.recipe_helpers import small_recipe

PROCESS = "  - words_num_filter: {min_num: 20, max_num: 2000}\n"


@pytest.fixture(scope="module")
def gated_job(tmp_path_factory):
    """A job stopped by its review gate (nothing exported), and its decided review."""
    from airflow_provider_dj.engine import run_job

    tmp = tmp_path_factory.mktemp("review_op")
    recipe = small_recipe(tmp, "gated_op", PROCESS, rows=80, seed=4)
    with open(recipe, "a", encoding="utf-8") as fh:
        fh.write("review:\n  max_removed_fraction: 0.01\n  on_timeout: reject\n")
    with pytest.raises(ReviewRejectedError):
        run_job(recipe, job_id="op1", workers=1)
    job_dir = str(tmp / "work" / "op1")
    return job_dir, decide_review(job_dir).to_dict()


class _TI:
    def __init__(self, pushed: dict) -> None:
        self.pushed = pushed

    def xcom_pull(self, task_ids=None, key=None):
        return self.pushed


def _event(option: str, user: dict | None) -> dict:
    return {
        "chosen_options": [option],
        "params_input": {},
        "responded_at": datetime.now(timezone.utc),
        "responded_by_user": user,
    }


def _answers(job_dir: str) -> list[tuple[str, str | None]]:
    return [(e["status"], e.get("responded_by")) for e in read_events(job_dir, "review_answered")]


def test_approve_reject_and_a_timeout_default_are_recorded_and_only_approve_passes(gated_job):
    from airflow_provider_dj.operators.review import ReviewOperator

    job_dir, pushed = gated_job
    op = ReviewOperator(task_id="review", job_dir=job_dir)
    assert op.defaults == ["Reject"] and op.retries == 0
    context = {"ti": _TI(pushed), "task": op}
    before = len(_answers(job_dir))
    op.execute_complete(context, _event("Approve", {"id": "1", "name": "alice"}))
    with pytest.raises(ReviewRejectedError, match="review rejected before export of job op1: op 0 words_num_filter"):
        op.execute_complete(context, _event("Reject", {"id": "1", "name": "bob"}))
    with pytest.raises(ReviewRejectedError, match=r"timed out \(review.on_timeout: reject\).*--resume op1"):
        op.execute_complete(context, _event("Reject", None))  # the scheduler applied the default
    with pytest.raises(ReviewRejectedError, match="timed out"):
        op.execute_complete(context, {"error": "no response", "error_type": "timeout"})
    assert _answers(job_dir)[before:] == [
        ("approved", "alice"),
        ("rejected", "bob"),
        ("timed_out", None),
        ("timed_out", None),
    ]


def test_a_timeout_that_approves_exports(gated_job):
    from airflow_provider_dj.operators.review import ReviewOperator

    job_dir, pushed = gated_job
    op = ReviewOperator(task_id="review", job_dir=job_dir, timeout_s=60, on_timeout="approve")
    assert op.defaults == ["Approve"] and op.response_timeout.total_seconds() == 60
    op.execute_complete({"ti": _TI(pushed), "task": op}, _event("Approve", None))
    assert _answers(job_dir)[-1] == ("timed_out", None)
