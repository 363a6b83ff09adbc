"""ReviewOperator: the review gate before export, as Airflow's human-in-the-loop approval (docs/review_gate.md).

The DAG factory adds it before ``export`` only for a recipe with ``review:``.  It decides first
(``engine.job.review.decide_review``): no bound crossed, and it succeeds at once, without asking
anyone.  A crossed bound makes it an ``ApprovalOperator``: the task waits for an answer (on Airflow
3.3 in the ``awaiting_input`` state, no worker slot held; earlier versions defer to the triggerer),
showing the bounds crossed, the funnel against the previous successful job, removed rows with their
why and a link to the job view.  Approve: the export runs.  Reject, or a timeout whose recipe default
is reject: the task fails, so the export (trigger rule ``none_failed``) does not run and the DAG run
fails; nothing is exported and every checkpoint is kept, so a fixed recipe resumes the job.

Under ``dj-airflow run --airflow`` (``local_run``) nobody watches the UI: the question is asked on
the terminal, or the task fails at once with ``--no-input``.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any, Sequence

from airflow.providers.standard.operators.hitl import ApprovalOperator

from airflow_provider_dj.engine.job.completed_export import is_job_complete
from airflow_provider_dj.engine.job.review import (
    APPROVED,
    REJECTED,
    TIMED_OUT,
    ReviewRejectedError,
    ask_on_terminal,
    decide_review,
    record_answer,
    rejection_message,
    render_markdown,
)
from airflow_provider_dj.operators.base import event_defaults
from airflow_provider_dj.operators.local_run import LocalRun

if TYPE_CHECKING:
    from airflow.sdk import Context

#: The XCom key the decided review is pushed under (the answer's messages read it back).
REVIEW_XCOM_KEY = "review"


class ReviewOperator(ApprovalOperator):
    """Decide the recipe's review bounds; ask a person only when one is crossed (module docstring).

    :param job_dir: the job directory (templated).
    :param timeout_s: how long to wait for an answer (None: no limit).
    :param on_timeout: what no answer in time means: ``reject`` (default) or ``approve``.
    :param local_run: set only by ``dj-airflow run``: its in-process Ray's CPUs and CPU-only concurrency
        (operators/local_run.py); None under a scheduler."""

    template_fields: Sequence[str] = ("job_dir",)
    ui_color = "#fbe7c6"

    def __init__(
        self,
        *,
        job_dir: str,
        timeout_s: float | None = None,
        on_timeout: str = "reject",
        local_run: dict | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("subject", "Data-Juicer review before export")
        kwargs.setdefault("retries", 0)  # an answer is final: a retry would ask again
        super().__init__(
            fail_on_reject=True,
            defaults=[self.APPROVE if on_timeout == "approve" else self.REJECT],
            response_timeout=timedelta(seconds=timeout_s) if timeout_s else None,
            **kwargs,
        )
        self.job_dir = job_dir
        self.on_timeout = on_timeout
        self.local_run = local_run

    def execute(self, context: Context) -> Any:
        from airflow_provider_dj.hooks.host_services import install_airflow_host

        install_airflow_host()
        if is_job_complete(self.job_dir):
            self.log.info("the job's export is already complete: nothing to review")
            return None
        review = decide_review(
            self.job_dir, job_view_url=_job_view_url(self.job_dir), event_defaults=event_defaults(context)
        )
        if not review.needs_review:
            self.log.info("no review bound crossed: the export goes ahead")
            return None
        self.log.warning("review needed: %s", review.headline())
        context["ti"].xcom_push(key=REVIEW_XCOM_KEY, value=review.to_dict())
        local = LocalRun.of(self.local_run)
        if local is not None:
            return self._answer_locally(context, review, local)
        self.subject = f"Review before export: {review.headline()}"[:1000]
        self.body = render_markdown(review)
        return super().execute(context)

    def _answer_locally(self, context: Context, review, local: LocalRun) -> None:
        """``dj-airflow run --airflow``: ask on the terminal, or fail under ``--no-input``."""
        approved = local.review_input and ask_on_terminal(review)
        record_answer(
            self.job_dir, APPROVED if approved else REJECTED, by="terminal", event_defaults=event_defaults(context)
        )
        if not approved:
            note = "" if local.review_input else " (--no-input: nobody to ask)"
            raise ReviewRejectedError(rejection_message(review, REJECTED) + note)

    def execute_complete(self, context: Context, event: dict[str, Any]) -> Any:
        """The person's answer (or the timeout's): recorded as a ``review_answered`` event; anything but
        an approval fails the task with the bounds crossed and the resume command."""
        from airflow.providers.standard.exceptions import HITLRejectException, HITLTimeoutError

        defaults = event_defaults(context)
        by = _responder(event)
        try:
            result = super().execute_complete(context, event)
        except HITLTimeoutError:
            record_answer(self.job_dir, TIMED_OUT, event_defaults=defaults)
            raise ReviewRejectedError(self._message(context, TIMED_OUT)) from None
        except HITLRejectException:
            answer = TIMED_OUT if by is None else REJECTED
            record_answer(self.job_dir, answer, by=by, event_defaults=defaults)
            raise ReviewRejectedError(self._message(context, answer)) from None
        record_answer(self.job_dir, APPROVED if by else TIMED_OUT, by=by, event_defaults=defaults)
        self.log.info("review approved by %s: the export runs", by or "the timeout's default")
        return result

    def _message(self, context: Context, answer: str) -> str:
        from airflow_provider_dj.engine.job.review import Review

        pushed = context["ti"].xcom_pull(task_ids=self.task_id, key=REVIEW_XCOM_KEY)
        review = Review(**pushed) if pushed else decide_review(self.job_dir)
        return rejection_message(review, answer)


def _responder(event: dict) -> str | None:
    """Who answered: the user's name or id, None for the timeout's default."""
    user = event.get("responded_by_user") or {}
    if isinstance(user, dict):
        return user.get("name") or user.get("id")
    return getattr(user, "name", None) or getattr(user, "id", None)


def _job_view_url(job_dir: str) -> str:
    """The job view's page of this job (plugins/app.py), under the api-server's base URL when set."""
    from airflow.configuration import conf

    from airflow_provider_dj.core import fs as storage
    from airflow_provider_dj.plugins.app import URL_PREFIX

    base = (conf.get("api", "base_url", fallback="") or "").rstrip("/")
    return f"{base}{URL_PREFIX}/job/{storage.basename(job_dir)}"
