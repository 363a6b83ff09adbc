"""``dj-airflow``'s rendering of templated recipe values before the DAG run exists.

Why: ``dj-airflow validate`` prints how a run of a logical date would render
the recipe, and ``dj-airflow run`` checks the rendered input before it starts
Airflow and Ray (bad input fails in a second).  Both use Airflow's Jinja
environment (StrictUndefined) with the context keys that follow from a
logical date alone: ``ds``, ``ts``, ``logical_date``, ``data_interval_*`` from
the recipe's schedule exactly as ``dag.test`` computes them, ``macros``,
and ``params`` (``run_id`` depends on when the run starts).  A template that uses a name only a running task has
(``ti``, ``var``) is reported as not previewable, not as an error.  The validate
task's rendering (templating.task_renderer) is the one the job uses.
"""

from __future__ import annotations

import datetime as dt

from airflow_provider_dj.dag_builder.templating import date_values, iso, strict_env
from airflow_provider_dj.engine.config.templates import TemplateNotPreviewable, TemplateRenderer


def data_interval(schedule: str | None, logical_date: dt.datetime) -> tuple[dt.datetime, dt.datetime]:
    """The data interval ``dag.test(logical_date=...)`` gives a run of this schedule."""
    from airflow.sdk import DAG
    from airflow.serialization.encoders import coerce_to_core_timetable

    from airflow_provider_dj.dag_builder.factory import START_DATE

    timetable = DAG(dag_id="dj_preview", schedule=schedule, start_date=START_DATE).timetable
    interval = coerce_to_core_timetable(timetable).infer_manual_data_interval(run_after=logical_date)
    return interval.start, interval.end


def preview_context(logical_date: dt.datetime, schedule: str | None, conf: dict | None = None) -> dict:
    """The context keys a DAG run of this logical date will have, as far as they follow from the date."""
    from airflow.sdk.execution_time.context import MacrosAccessor

    from airflow_provider_dj.dag_builder.factory import PARAM_SCHEMAS

    start, end = data_interval(schedule, logical_date)
    ds = logical_date.strftime("%Y-%m-%d")
    return {
        "logical_date": logical_date,
        "ds": ds,
        "ds_nodash": ds.replace("-", ""),
        "ts": logical_date.isoformat(),
        "ts_nodash": logical_date.strftime("%Y%m%dT%H%M%S"),
        "ts_nodash_with_tz": logical_date.isoformat().replace("-", "").replace(":", ""),
        "data_interval_start": start,
        "data_interval_end": end,
        "macros": MacrosAccessor(),
        "params": {key: (conf or {}).get(key) for key in PARAM_SCHEMAS},
    }


def preview_renderer(logical_date: dt.datetime, schedule: str | None, conf: dict | None = None) -> TemplateRenderer:
    """Render as a run of ``logical_date`` will, with what is known before the run starts."""
    import re

    import jinja2
    from airflow.sdk.definitions._internal.templater import create_template_env
    from airflow.sdk.definitions.context import KNOWN_CONTEXT_KEYS, render_template_to_string

    env = strict_env(create_template_env())
    context = preview_context(logical_date, schedule, conf)

    def render(template: str) -> str:
        try:
            return render_template_to_string(env.from_string(template), context)
        except jinja2.UndefinedError as exc:
            m = re.match(r"'(\w+)' is undefined", str(exc))
            if m and m.group(1) in KNOWN_CONTEXT_KEYS and m.group(1) not in context:
                raise TemplateNotPreviewable(m.group(1)) from None
            raise

    return TemplateRenderer(
        render=render,
        logical_date=iso(logical_date),
        date_values=date_values(context),
        context_note=(
            "rendered before the run starts, with the logical-date keys, data_interval_*, macros and params "
            "only; run_id, ti, dag_run, var and conn exist only in the task"
        ),
    )
