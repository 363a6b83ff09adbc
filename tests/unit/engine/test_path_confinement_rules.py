"""``[dj] allowed_roots`` (engine/config/path_confinement.py): which paths a root admits, and that the
recipe parser and the input listing refuse the others before anything is read."""

from __future__ import annotations

import os

import jinja2
import pytest

from airflow_provider_dj.engine.config.path_confinement import AllowedRoots, PathOutsideRootsError, allowed_roots
from airflow_provider_dj.engine.config.recipe import RecipeError, parse_recipe
from airflow_provider_dj.engine.config.templates import TemplateRenderer
from airflow_provider_dj.engine.input.sources import InputError, InputOutsideRootsError, list_input_files
from airflow_provider_dj.settings import SettingError

ENV_NAME = "AIRFLOW__DJ__ALLOWED_ROOTS"


@pytest.fixture
def tree(tmp_path):
    """tmp/data/in (a root) with a file, a sibling data/input2, and an outside folder with a secret."""
    (tmp_path / "data" / "in").mkdir(parents=True)
    (tmp_path / "data" / "input2").mkdir()
    (tmp_path / "outside").mkdir()
    (tmp_path / "data" / "in" / "a.jsonl").write_text('{"text": "inside"}\n')
    (tmp_path / "outside" / "secret.jsonl").write_text('{"text": "secret"}\n')
    return tmp_path


def roots(*items: str) -> AllowedRoots:
    parsed = AllowedRoots.parse(",".join(items))
    assert parsed is not None
    return parsed


# -- matching ---------------------------------------------------------------------------------------
def test_a_local_root_admits_itself_and_below_by_whole_components(tree):
    r = roots(str(tree / "data" / "in"))
    assert r.admits(str(tree / "data" / "in"))
    assert r.admits(str(tree / "data" / "in" / "a.jsonl"))
    assert r.admits(str(tree / "data" / "in" / "new" / "out.jsonl"))  # need not exist yet
    assert not r.admits(str(tree / "data" / "input2" / "a.jsonl"))  # a prefix of the text, not of the components
    assert not r.admits(str(tree / "data"))
    assert not r.admits(str(tree / "outside" / "secret.jsonl"))


def test_dotdot_cannot_climb_out_of_a_root(tree):
    r = roots(str(tree / "data" / "in"))
    assert not r.admits(f"{tree}/data/in/../input2/a.jsonl")
    assert not r.admits(f"{tree}/data/in/sub/../../../outside/secret.jsonl")
    assert r.admits(f"{tree}/data/in/sub/../a.jsonl")


def test_tilde_is_expanded_in_roots_and_paths(tree, monkeypatch):
    monkeypatch.setenv("HOME", str(tree))
    r = roots("~/data/in")
    assert r.admits("~/data/in/a.jsonl")
    assert r.admits(str(tree / "data" / "in" / "a.jsonl"))
    assert not r.admits("~/outside/secret.jsonl")


def test_a_symlink_inside_a_root_that_points_outside_is_refused(tree):
    inside = tree / "data" / "in"
    os.symlink(tree / "outside", inside / "link_dir")
    os.symlink(tree / "outside" / "secret.jsonl", inside / "link.jsonl")
    r = roots(str(inside))
    assert not r.admits(str(inside / "link_dir" / "secret.jsonl"))
    assert not r.admits(str(inside / "link_dir" / "new.jsonl"))  # a file to be written through the link
    assert not r.admits(str(inside / "link.jsonl"))
    assert r.resolve(str(inside / "link.jsonl")) == str(tree / "outside" / "secret.jsonl")


def test_a_root_that_is_a_symlink_admits_what_it_points_to(tree):
    os.symlink(tree / "data", tree / "data_link")
    r = roots(str(tree / "data_link" / "in"))
    assert r.admits(str(tree / "data" / "in" / "a.jsonl"))
    assert r.admits(str(tree / "data_link" / "in" / "a.jsonl"))
    assert not r.admits(str(tree / "data" / "input2"))


def test_url_roots_compare_scheme_and_components():
    r = roots("s3://corpus/clean", "gs://other")
    assert r.admits("s3://corpus/clean")
    assert r.admits("s3://corpus/clean/2026/out.jsonl")
    assert r.admits("s3://corpus//clean/./x.jsonl")  # empty and '.' components do not count
    assert r.admits("S3://corpus/clean/x.jsonl")  # schemes are case-insensitive
    assert r.admits("gs://other/anything.parquet")
    assert not r.admits("s3://corpus/cleaner/x.jsonl")
    assert not r.admits("s3://corpus/x.jsonl")
    assert not r.admits("gs://corpus/clean/x.jsonl")  # same path, another scheme
    assert not r.admits("s3://corpus/clean/../private/x.jsonl")
    assert not r.admits("s3://corpus/clean/a/../b.jsonl")  # any '..' in a URL is refused
    assert not r.admits("zip://x.jsonl::s3://corpus/clean/a.zip")  # a chained URL cannot be confined


def test_local_paths_never_match_url_roots_and_urls_never_match_local_roots(tree):
    r = roots(str(tree / "data" / "in"), "s3://corpus/clean")
    assert not r.admits("/corpus/clean/x.jsonl")
    assert not r.admits(f"s3:/{tree}/data/in/a.jsonl".replace("s3:/", "s3://", 1))
    assert r.admits(f"file://{tree}/data/in/a.jsonl")  # a file:// URL is a local path
    assert not r.admits(f"file://{tree}/outside/secret.jsonl")


def test_a_glob_is_confined_by_its_part_before_the_first_wildcard(tree):
    r = roots(str(tree / "data" / "in"))
    assert r.refusal(f"{tree}/data/in/*.jsonl") is None
    assert r.refusal(f"{tree}/data/in/**/part-*.parquet") is None
    message = r.refusal(f"{tree}/data/in*/x.jsonl")  # would also match data/input2
    assert message is not None and repr(str(tree / "data")) in message


def test_unset_or_empty_confines_nothing(monkeypatch):
    monkeypatch.delenv(ENV_NAME, raising=False)
    monkeypatch.delenv("DJ_ALLOWED_ROOTS", raising=False)
    assert allowed_roots() is None
    monkeypatch.setenv(ENV_NAME, " , ")
    assert allowed_roots() is None


def test_the_setting_is_read_from_airflows_variable_and_the_dj_one(tree, monkeypatch):
    monkeypatch.setenv("DJ_ALLOWED_ROOTS", f"{tree}/data/in, s3://corpus/clean")
    r = allowed_roots()
    assert r is not None and r.text == (f"{tree}/data/in", "s3://corpus/clean")
    monkeypatch.setenv(ENV_NAME, f"{tree}/outside")
    assert allowed_roots().text == (f"{tree}/outside",)


@pytest.mark.parametrize("bad", ["data/in", "s3://", "s3://corpus/../x", "simplecache::s3://corpus"])
def test_a_root_that_cannot_confine_is_a_setting_error_naming_the_variable(bad, monkeypatch):
    monkeypatch.setenv(ENV_NAME, f"/data,{bad}")
    with pytest.raises(SettingError) as err:
        allowed_roots()
    assert ENV_NAME in str(err.value) and repr(bad) in str(err.value)


# -- the recipe ------------------------------------------------------------------------------------
def recipe(tree, **extra) -> dict:
    return {
        "dataset_path": str(tree / "data" / "in" / "a.jsonl"),
        "export_path": str(tree / "data" / "out" / "result.jsonl"),
        "process": ["whitespace_normalization_mapper"],
        **extra,
    }


@pytest.fixture
def confined(tree, monkeypatch):
    monkeypatch.setenv(ENV_NAME, f"{tree}/data/in,{tree}/data/out,s3://corpus/clean")
    return tree


def test_a_recipe_inside_the_roots_parses(confined):
    history = {"path": str(confined / "data" / "out" / "history"), "ops": ["document_deduplicator"]}
    r = parse_recipe(recipe(confined, process=["document_deduplicator"], dedup_history=history))
    assert r.work_dir == str(confined / "data" / "out") and r.dedup_history.path == history["path"]


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("dataset_path", "{t}/outside/secret.jsonl"),
        ("dataset_path", "{t}/data/in/../../outside/secret.jsonl"),
        ("export_path", "{t}/data/input2/result.jsonl"),
        ("export_path", "s3://corpus/private/result.jsonl"),
        ("work_dir", "{t}/outside/work"),
        ("work_dir", "/"),
    ],
)
def test_an_override_outside_the_roots_is_refused_naming_key_path_and_roots(confined, key, value):
    value = value.format(t=confined)
    with pytest.raises(PathOutsideRootsError) as err:
        parse_recipe(recipe(confined), source_file="/r/job.yaml", overrides={key: value})
    e = err.value
    assert isinstance(e, RecipeError) and e.key == key and e.file == "/r/job.yaml"
    shown = value if "://" in value else os.path.normpath(value)  # the parser resolves local paths first
    assert repr(shown) in e.message and "(from dag_run.conf)" in e.message
    assert f"{confined}/data/in, {confined}/data/out, s3://corpus/clean" in e.message
    assert "ask the deployment's admin" in e.message


def test_export_path_defaults_work_dir_and_both_are_confined(confined):
    with pytest.raises(PathOutsideRootsError) as err:
        parse_recipe(recipe(confined, export_path=str(confined / "outside" / "r.jsonl")))
    assert err.value.key == "export_path"


def test_dedup_history_path_is_confined(confined):
    data = recipe(
        confined,
        process=["document_deduplicator"],
        dedup_history={"path": str(confined / "outside" / "history"), "ops": ["document_deduplicator"]},
    )
    with pytest.raises(PathOutsideRootsError) as err:
        parse_recipe(data)
    assert err.value.key == "dedup_history.path"


def test_without_the_setting_every_path_is_allowed(tree, monkeypatch):
    monkeypatch.delenv(ENV_NAME, raising=False)
    monkeypatch.delenv("DJ_ALLOWED_ROOTS", raising=False)
    r = parse_recipe(recipe(tree), overrides={"export_path": str(tree / "outside" / "r.jsonl")})
    assert r.export_path == str(tree / "outside" / "r.jsonl")


def test_the_dags_parse_does_not_confine(confined):
    r = parse_recipe(recipe(confined, export_path=str(confined / "outside" / "r.jsonl")), confine_paths=False)
    assert r.export_path == str(confined / "outside" / "r.jsonl")


def test_a_template_is_confined_once_rendered(confined):
    data = recipe(confined, export_path="{{ export_dir }}/r.jsonl")
    parsed = parse_recipe(data)  # kept as written, and so is the work_dir derived from it
    assert (parsed.export_path, parsed.work_dir) == ("{{ export_dir }}/r.jsonl", "{{ export_dir }}")
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    outside = str(confined / "outside")
    render = TemplateRenderer(lambda t: env.from_string(t).render(export_dir=outside), logical_date="2026-12-01")
    with pytest.raises(PathOutsideRootsError) as err:
        parse_recipe(data, renderer=render)
    assert err.value.key == "export_path" and "rendered from the template" in err.value.message


def test_an_ops_path_argument_is_refused_before_the_op_reads_it(confined):
    # The filter's own check loads the word lists: a refusal must come first, so the outside folder
    # (here: it holds no word list at all) is never read.
    words = {"flagged_words_filter": {"flagged_words_dir": str(confined / "outside")}}
    with pytest.raises(PathOutsideRootsError) as err:
        parse_recipe(recipe(confined, process=[words]))
    assert err.value.key == "process[0].flagged_words_filter.flagged_words_dir"


def test_a_bare_model_name_is_left_to_the_deployments_model_folders(confined):
    # A bare name is looked up in the deployment's folders, not confined; the op then reports it missing.
    op = {"language_id_score_filter": {"lang": "en", "model_path": "no_such_model.bin"}}
    with pytest.raises(RecipeError) as err:
        parse_recipe(recipe(confined, process=[op]))
    assert not isinstance(err.value, PathOutsideRootsError)


def test_adapted_data_juicer_ops_know_their_path_arguments():
    from airflow_provider_dj.ops.registry import get_op_class

    cls = get_op_class("flagged_words_filter")
    assert cls.path_arg_names() == ("flagged_words_dir",)
    from airflow_provider_dj.ops.dj_compat.adapter import create_adapted_op

    adapted = type(create_adapted_op("video_split_by_scene_mapper", {}, "text"))
    names = adapted.path_arg_names()
    assert "save_dir" in names and "work_dir" in names and "text_key" not in names


# -- the input listing -----------------------------------------------------------------------------
def test_a_listed_file_linking_outside_the_roots_is_refused_before_it_is_read(confined):
    os.symlink(confined / "outside" / "secret.jsonl", confined / "data" / "in" / "b.jsonl")
    with pytest.raises(InputOutsideRootsError) as err:
        list_input_files(str(confined / "data" / "in"))
    assert isinstance(err.value, InputError) and isinstance(err.value, PathOutsideRootsError)
    assert err.value.key == "dataset_path"
    assert str(confined / "outside" / "secret.jsonl") in err.value.message
    with pytest.raises(InputOutsideRootsError):
        list_input_files(str(confined / "data" / "in" / "*.jsonl"))


def test_a_listing_inside_the_roots_is_unchanged(confined):
    files = list_input_files(str(confined / "data" / "in"))
    assert [f.path for f in files] == [str(confined / "data" / "in" / "a.jsonl")]
