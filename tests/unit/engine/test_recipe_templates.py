"""Templated recipe values (engine/config/templates.py, airflow_provider_dj/dag_builder/templating.py)."""

from __future__ import annotations

import jinja2
import pytest

from airflow_provider_dj.engine.config.recipe import RecipeError, parse_recipe
from airflow_provider_dj.engine.config.templates import TemplateRenderer, rendered_differences

ENV = jinja2.Environment(undefined=jinja2.StrictUndefined)


def renderer(**context) -> TemplateRenderer:
    return TemplateRenderer(
        lambda t: ENV.from_string(t).render(**context), logical_date=context.get("ds"), run_id="run_1"
    )


def nightly(**extra) -> dict:
    return {
        "dataset_path": "/data/crawl/{{ ds }}/*.jsonl",
        "export_path": "/data/clean/{{ ds }}.jsonl",
        "process": [
            "whitespace_normalization_mapper",
            {"remove_words_with_incorrect_substrings_mapper": {"substrings": ["{{ marker }}", "x"]}},
            {"words_num_filter": {"min_num": "{{ min_words }}", "max_num": 500}},
        ],
        **extra,
    }


def test_renders_top_level_and_nested_values_and_records_template_and_rendered():
    r = parse_recipe(nightly(), source_file="/r/n.yaml", renderer=renderer(ds="2026-11-30", min_words=7, marker="#"))
    assert r.dataset_path == "/data/crawl/2026-11-30/*.jsonl"
    assert r.export_path == "/data/clean/2026-11-30.jsonl"
    assert r.work_dir == "/data/clean"
    # A rendered argument whose type is not a string is read as YAML; list items stay strings.
    assert r.process[2].args == {"min_num": 7, "max_num": 500}
    assert r.process[1].args == {"substrings": ["#", "x"]}
    assert r.templates == {
        "logical_date": "2026-11-30",
        "run_id": "run_1",
        "values": {
            "dataset_path": {"template": "/data/crawl/{{ ds }}/*.jsonl", "rendered": "/data/crawl/2026-11-30/*.jsonl"},
            "export_path": {"template": "/data/clean/{{ ds }}.jsonl", "rendered": "/data/clean/2026-11-30.jsonl"},
            "process[1].remove_words_with_incorrect_substrings_mapper.substrings[0]": {
                "template": "{{ marker }}",
                "rendered": "#",
            },
            "process[2].words_num_filter.min_num": {"template": "{{ min_words }}", "rendered": "7"},
        },
    }
    assert r.to_dict()["templates"] == r.templates  # what the job directory's effective config records


def test_undefined_variable_is_an_error_naming_the_key_and_the_template():
    with pytest.raises(RecipeError) as err:
        parse_recipe(nightly(), source_file="/r/n.yaml", renderer=renderer(ds="2026-11-30", marker="#"))
    assert err.value.key == "process[2].words_num_filter.min_num"
    assert "'{{ min_words }}'" in str(err.value) and "'min_words' is undefined" in str(err.value)


def test_a_rendered_value_of_the_wrong_type_names_the_key_and_its_template():
    with pytest.raises(RecipeError) as err:
        parse_recipe(nightly(), renderer=renderer(ds="2026-11-30", min_words="many", marker="#"))
    assert err.value.key == "process[2].words_num_filter.min_num"
    assert "must be int" in str(err.value) and "rendered from the template '{{ min_words }}'" in str(err.value)


def test_parse_time_keeps_templates_as_written_and_checks_what_it_can():
    r = parse_recipe(nightly(work_dir="{{ var.value.root }}/work"), base_dir="/recipes")
    assert r.dataset_path == "/data/crawl/{{ ds }}/*.jsonl"
    assert r.export_path == "/data/clean/{{ ds }}.jsonl"
    assert r.work_dir == "{{ var.value.root }}/work"  # not joined to the recipe's folder: known once rendered
    assert r.process[2].args["min_num"] == "{{ min_words }}"
    assert set(r.templates["values"]) == {
        "dataset_path",
        "export_path",
        "work_dir",
        "process[1].remove_words_with_incorrect_substrings_mapper.substrings[0]",
        "process[2].words_num_filter.min_num",
    }
    assert "rendered" not in r.templates["values"]["export_path"]
    # The name of a templated argument is still checked, and the export's suffix.
    bad = nightly()
    bad["process"][2] = {"words_num_filter": {"min_nun": "{{ n }}"}}
    with pytest.raises(RecipeError, match="has no argument 'min_nun'"):
        parse_recipe(bad)
    with pytest.raises(RecipeError, match="ending in .jsonl"):
        parse_recipe(nightly(export_path="/data/clean/{{ ds }}"))


@pytest.mark.parametrize(
    ("key", "value", "words"),
    [
        ("project_name", "crawl_{{ ds }}", "names the DAG"),
        ("schedule", "{{ cron }}", "DAG's schedule"),
        ("job_id", "j_{{ ds_nodash }}", "derived from the DAG run"),
        ("partition", {"pool": "{{ pool }}"}, "parsed"),
    ],
)
def test_keys_read_at_parse_time_cannot_be_templated(key, value, words):
    with pytest.raises(RecipeError) as err:
        parse_recipe(nightly(**{key: value}), source_file="/r/n.yaml")
    assert err.value.key == (key if key != "partition" else "partition.pool")
    assert "cannot be templated" in str(err.value) and words in str(err.value)


def test_engine_level_op_arguments_and_op_names_cannot_be_templated():
    data = nightly()
    data["process"][2]["words_num_filter"]["num_gpus"] = "{{ gpus }}"
    with pytest.raises(RecipeError, match="engine-level op argument") as err:
        parse_recipe(data)
    assert err.value.key == "process[2].words_num_filter.num_gpus"
    data = nightly()
    data["process"][0] = "{{ op }}"
    with pytest.raises(RecipeError, match="op list shapes the DAG"):
        parse_recipe(data)


def test_non_string_values_and_recipes_without_templates_are_untouched():
    calls = []
    plain = {"dataset_path": "/d/in.jsonl", "export_path": "/d/out.jsonl", "np": 2, "skip_op_error": False}
    plain["process"] = [{"words_num_filter": {"min_num": 3}}]
    r = parse_recipe(plain, renderer=TemplateRenderer(lambda t: calls.append(t) or t))
    assert calls == [] and r.templates == {} and "templates" not in r.to_dict()
    assert (r.np, r.skip_op_error, r.process[0].args) == (2, False, {"min_num": 3})


def test_rendered_differences_name_the_paths_another_logical_date_changes():
    a = parse_recipe(nightly(), renderer=renderer(ds="2026-11-30", min_words=1, marker="#")).templates
    b = parse_recipe(nightly(), renderer=renderer(ds="2026-12-01", min_words=1, marker="#")).templates
    assert rendered_differences(a, a, ("dataset_path", "export_path")) == []
    lines = rendered_differences(a, b, ("dataset_path", "export_path"))
    assert len(lines) == 2 and "2026-11-30.jsonl" in lines[1] and "2026-12-01.jsonl" in lines[1]

    from airflow_provider_dj.engine.job.resume import ResumeRefusedError, check_same_rendering

    with pytest.raises(ResumeRefusedError, match="logical date 2026-11-30") as err:
        check_same_rendering(a, b)
    assert err.value.reason == "template_rendered_differently"
