"""Airflow's side of templated recipe values: its rendering (templating.py), the preview of
``dj-airflow`` (template_preview.py), the Asset of a templated path (assets.py)."""

from __future__ import annotations

import jinja2
import pytest

from airflow_provider_dj.engine.config.templates import template_pattern


def test_template_pattern_and_asset_uri_of_a_templated_path():
    from airflow_provider_dj.dag_builder.assets import asset_uri

    assert template_pattern("/data/clean/{{ ds }}.jsonl") == "/data/clean/*.jsonl"
    assert asset_uri("/data/clean/{{ ds }}.jsonl", templated=True) == "file:///data/clean/*.jsonl"
    assert asset_uri("s3://b/{{ ds }}/{{ ds_nodash }}x.parquet", templated=True) == "s3://b/*/*x.parquet"
    assert asset_uri("{{ var.value.root }}/x.jsonl", templated=True) == "x-dj-airflow:*/x.jsonl"


def test_task_renderer_is_airflows_rendering_with_macros_and_strict_undefined(tmp_path):
    import pendulum
    from airflow.sdk import DAG
    from airflow.sdk.execution_time.context import MacrosAccessor

    from airflow_provider_dj.dag_builder.templating import task_renderer
    from airflow_provider_dj.operators.resume_validator import ResumeValidatorOperator

    with DAG(dag_id="t", schedule=None):
        op = ResumeValidatorOperator(task_id="validate", recipe_path=str(tmp_path / "r.yaml"))
    day = pendulum.datetime(2026, 11, 30, tz="UTC")
    ctx = {"ds": "2026-11-30", "logical_date": day, "data_interval_start": day, "macros": MacrosAccessor()}
    r = task_renderer(op, ctx)
    assert r.render("{{ macros.ds_add(ds, -1) }}/{{ data_interval_start | ds_nodash }}") == "2026-11-29/20261130"
    assert r.logical_date == "2026-11-30T00:00:00+00:00"
    with pytest.raises(jinja2.UndefinedError):
        r.render("{{ dss }}")
    assert "no logical date" in task_renderer(op, {}).context_note


def test_parse_logical_date_accepts_a_date_or_an_iso_datetime():
    from airflow_provider_dj.dag_builder.templating import LogicalDateError, parse_logical_date

    assert parse_logical_date("2026-11-30").isoformat() == "2026-11-30T00:00:00+00:00"
    assert parse_logical_date("2026-11-30T03:00:00+01:00").isoformat() == "2026-11-30T03:00:00+01:00"
    with pytest.raises(LogicalDateError, match="Write 2026-11-30"):
        parse_logical_date("30/11/2026")


def test_preview_renders_as_dag_test_will_and_says_when_only_the_task_can():
    from airflow_provider_dj.cli.template_preview import preview_renderer
    from airflow_provider_dj.dag_builder.templating import parse_logical_date
    from airflow_provider_dj.engine.config.templates import TemplateNotPreviewable

    r = preview_renderer(parse_logical_date("2026-11-30"), "@daily", {"np": 3})
    assert r.render("{{ ds }} {{ ds_nodash }} {{ macros.ds_add(ds, 1) }} {{ params.np }}") == (
        "2026-11-30 20261130 2026-12-01 3"
    )
    for only_in_the_task in ("{{ ti.try_number }}", "{{ run_id }}"):
        with pytest.raises(TemplateNotPreviewable):
            r.render(only_in_the_task)
    with pytest.raises(jinja2.UndefinedError):
        r.render("{{ dss }}")  # a typo stays an error


def test_cli_validate_lists_templated_keys_and_renders_them_for_the_logical_date(tmp_path, capsys):
    from airflow_provider_dj.cli.main import main

    (tmp_path / "crawl" / "2026-11-30").mkdir(parents=True)
    (tmp_path / "crawl" / "2026-11-30" / "a.jsonl").write_text('{"text": "one two three"}\n')
    recipe = tmp_path / "nightly.yaml"
    recipe.write_text(
        "dataset_path: crawl/{{ ds }}/*.jsonl\nexport_path: clean/{{ ds_nodash }}.jsonl\n"
        'process:\n  - words_num_filter:\n      min_num: \'{{ macros.ds_format(ds, "%Y-%m-%d", "%d") }}\'\n'
    )
    assert main(["validate", str(recipe), "--logical-date", "2026-11-30", "--check-input"]) == 0
    out = capsys.readouterr().out
    assert f"input:  {tmp_path}/crawl/2026-11-30/*.jsonl" in out
    assert "export_path: 'clean/{{ ds_nodash }}.jsonl' -> 'clean/20261130.jsonl'" in out
    assert "op 0: words_num_filter {'min_num': 30}" in out
    # Another day has no input folder: --check-input says so; a bad date is refused.
    assert main(["validate", str(recipe), "--logical-date", "2026-12-01", "--check-input"]) == 2
    assert "crawl/2026-12-01/*.jsonl' matches no input files" in capsys.readouterr().err
    assert main(["validate", str(recipe), "--logical-date", "tomorrow"]) == 2
    assert "is not a date or an ISO datetime" in capsys.readouterr().err
