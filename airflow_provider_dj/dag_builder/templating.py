"""Airflow's rendering for templated recipe values (engine/config/templates.py holds the rules).

Why Airflow's and not a Jinja of our own: a user who writes ``{{ ds }}``,
``{{ macros.ds_add(ds, -1) }}`` or ``{{ data_interval_start | ds }}`` in a
recipe expects exactly what the same text gives in any Airflow template.  The
validate task therefore renders with its own operator's ``render_template``,
the DAG's Jinja environment (StrictUndefined: an undefined name is an error,
never an empty string) and the task's context.

``dj-airflow`` renders before Airflow runs anything: template_preview.py.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

from airflow_provider_dj.core.errors import DJError
from airflow_provider_dj.engine.config.templates import TemplateRenderer
from airflow_provider_dj.engine.config.trigger_templates import TRIGGER_TEMPLATE_NAMES

if TYPE_CHECKING:
    from airflow.sdk import Context

#: The context keys that exist only once a DAG run has a logical date.
_DATE_KEYS = (
    "ds",
    "ds_nodash",
    "ts",
    "ts_nodash",
    "ts_nodash_with_tz",
    "logical_date",
    "data_interval_start",
    "data_interval_end",
)


class LogicalDateError(DJError, ValueError):
    """A ``--logical-date`` that is neither a date nor an ISO datetime."""


def parse_logical_date(text: str) -> dt.datetime:
    """``2026-11-30`` (midnight UTC) or an ISO datetime (``2026-11-30T03:00:00+01:00``; naive means UTC)."""
    import pendulum

    try:
        value = pendulum.parse(text.strip(), strict=True, tz="UTC")
    except (ValueError, TypeError, pendulum.parsing.exceptions.ParserError) as exc:
        raise LogicalDateError(
            f"--logical-date {text!r} is not a date or an ISO datetime: {exc}. Write 2026-11-30 or "
            f"2026-11-30T03:00:00+00:00"
        ) from None
    if not isinstance(value, pendulum.DateTime):  # a bare date parses to pendulum.Date
        value = pendulum.datetime(value.year, value.month, value.day, tz="UTC")
    return value


def strict_env(env):
    import jinja2

    if not (isinstance(env.undefined, type) and issubclass(env.undefined, jinja2.StrictUndefined)):
        env.undefined = jinja2.StrictUndefined  # a fresh environment per call: nothing else sees this
    return env


def iso(value: Any) -> str | None:
    return value.isoformat() if hasattr(value, "isoformat") else (None if value is None else str(value))


def date_values(context: Context) -> dict[str, str]:
    """The run's dates as plain strings: all that a trigger's own templates may name
    (engine/config/trigger_templates.py).  Empty for a run without a logical date."""
    values: dict[str, str] = {}
    for name in TRIGGER_TEMPLATE_NAMES:
        value = context.get(name)
        if value is not None:
            values[name] = value if isinstance(value, str) else iso(value)
    return values


def task_renderer(operator: Any, context: Context) -> TemplateRenderer:
    """How a task renders the recipe: its operator's ``render_template`` with the DAG's environment."""
    env = strict_env(operator.get_template_env())
    logical_date = context.get("logical_date")
    dag_run = context.get("dag_run")
    note = ""
    if logical_date is None:
        note = (
            f"this DAG run has no logical date (triggered without one), so {', '.join(_DATE_KEYS)} are "
            f"undefined: trigger it with a logical date"
        )
    return TemplateRenderer(
        render=lambda template: operator.render_template(template, context, env),
        logical_date=iso(logical_date),
        run_id=getattr(dag_run, "run_id", None),
        context_note=note,
        date_values=date_values(context) if logical_date is not None else {},
    )
