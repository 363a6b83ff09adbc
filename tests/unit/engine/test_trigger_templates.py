"""Templates in a trigger's values (engine/config/trigger_templates.py): data, never Airflow's context.

The recipe renderer here stands for Airflow's: it would render ``var``/``conn`` (it knows "SECRET"),
so a test that sees "SECRET" anywhere proves the trigger's template reached it."""

from __future__ import annotations

import jinja2
import pytest

from airflow_provider_dj.engine.config.recipe import RecipeError, parse_recipe
from airflow_provider_dj.engine.config.templates import TemplateRenderer
from airflow_provider_dj.engine.config.trigger_templates import check_trigger_template, render_trigger_template

ENV = jinja2.Environment(undefined=jinja2.StrictUndefined)
DATES = {
    "ds": "2026-11-30",
    "ds_nodash": "20261130",
    "logical_date": "2026-11-30T00:00:00+00:00",
    "data_interval_start": "2026-11-29T00:00:00+00:00",
    "data_interval_end": "2026-11-30T00:00:00+00:00",
}


class _Conn:
    host = "SECRET-host"
    password = "SECRET-password"


def airflow_like_renderer(dates=DATES) -> TemplateRenderer:
    context = {"var": {"value": {"region": "SECRET-var"}}, "conn": {"plain": _Conn()}, "ds": "2026-11-30"}
    return TemplateRenderer(
        lambda t: ENV.from_string(t).render(**context), logical_date=dates.get("logical_date"), date_values=dates
    )


def recipe(**extra) -> dict:
    return {
        "dataset_path": "/data/in.jsonl",
        "export_path": "/data/out.jsonl",
        "process": ["clean_email_mapper"],
        **extra,
    }


ATTACKS = [
    ("{{ conn.plain.host }}", "reads an attribute"),
    ("{{ var.value.region }}", "reads an attribute"),
    ("{{ var }}", "uses the name 'var'"),
    ("{{ macros.ds_add(ds, 1) }}", "calls a function"),
    ("{% include 'dj_recipes.py' %}", "includes a file"),
    ("{% import 'x' as y %}", "imports a template"),
    ("{% extends 'x' %}", "extends a template"),
    ("{% for c in conn %}{{ c }}{% endfor %}", "{% for %} statement"),
    ("{{ ds | upper }}", "applies a filter"),
    ("{{ ds.__class__ }}", "reads an attribute"),
    ("{{ 'a' ~ ds }}", "Concat"),
    ("{{ ds[0] }}", "reads an item"),
    ("{% raw %}{{ conn }}{% endraw %}", "raw block"),
    ("{{ ds ", "is not valid Jinja"),
]


@pytest.mark.parametrize("template, what", ATTACKS)
@pytest.mark.parametrize("with_renderer", [True, False], ids=["task", "parse"])
def test_a_trigger_template_beyond_the_dates_is_refused_naming_the_key(template, what, with_renderer):
    with pytest.raises(RecipeError) as err:
        parse_recipe(
            recipe(),
            source_file="/r/n.yaml",
            overrides={"export_path": f"/data/out/{template}.jsonl"},
            renderer=airflow_like_renderer() if with_renderer else None,
        )
    text = str(err.value)
    assert err.value.key == "export_path"
    assert "dag_run.conf" in text and what in text
    assert "{{ ds_nodash }}" in text and "Nothing was run" in text
    assert "SECRET" not in text


def test_the_dates_render_from_plain_values_and_are_recorded_as_from_the_trigger():
    r = parse_recipe(
        recipe(),
        source_file="/r/n.yaml",
        overrides={"export_path": "/data/{{ ds_nodash }}/{{ds}}-{{ data_interval_start }}.jsonl"},
        override_source="--set",
        renderer=airflow_like_renderer(),
    )
    assert r.export_path == "/data/20261130/2026-11-30-2026-11-29T00:00:00+00:00.jsonl"
    assert r.templates["values"]["export_path"]["from_trigger"] is True


def test_the_recipe_files_own_templates_keep_airflows_context():
    r = parse_recipe(
        recipe(export_path="/data/{{ var.value.region }}.jsonl"),
        source_file="/r/n.yaml",
        overrides={"dataset_path": "/data/{{ ds }}.jsonl"},
        renderer=airflow_like_renderer(),
    )
    assert r.export_path == "/data/SECRET-var.jsonl"  # the DAG's authors wrote it
    assert r.dataset_path == "/data/2026-11-30.jsonl"
    assert "from_trigger" not in r.templates["values"]["export_path"]


def test_a_trigger_value_replacing_a_recipe_template_is_the_triggers():
    with pytest.raises(RecipeError) as err:
        parse_recipe(
            recipe(export_path="/data/{{ var.value.region }}.jsonl"),
            source_file="/r/n.yaml",
            overrides={"export_path": "/data/{{ var.value.region }}.jsonl"},
            override_source="overrides",
            renderer=airflow_like_renderer(),
        )
    assert err.value.key == "export_path" and "overrides" in str(err.value)


def test_a_run_without_a_logical_date_names_the_key_and_why():
    renderer = TemplateRenderer(lambda t: t, context_note="this DAG run has no logical date")
    with pytest.raises(RecipeError) as err:
        parse_recipe(recipe(), source_file="/r/n.yaml", overrides={"work_dir": "/w/{{ ds }}"}, renderer=renderer)
    assert err.value.key == "work_dir" and "no logical date" in str(err.value)


def test_sandbox_refuses_in_the_rendering_function_too():
    with pytest.raises(RecipeError):
        render_trigger_template("{{ conn.x }}", DATES, key="k", source="s", file=None)
    assert render_trigger_template("a{{- ds -}} b", DATES, key="k", source="s", file=None) == "a2026-11-30b"
    check_trigger_template("plain text {# a comment #}", key="k", source="s", file=None)
