"""Trigger-time overrides: key whitelist, nested/dotted spellings, --set parsing, merging."""

from __future__ import annotations

import pickle

import pytest

from airflow_provider_dj.engine.config.overrides import (
    OVERRIDABLE_KEYS,
    RecipeError,
    deep_merge,
    normalize_overrides,
    parse_set_args,
)


def test_overridable_keys_cover_runtime_values_only():
    for key in (
        "dataset_path",
        "export_path",
        "work_dir",
        "job_id",
        "resume",
        "np",
        "skip_op_error",
        "keep_stats_in_res_ds",
        "max_failed_ratio",
        "open_tracer",
        "op_list_to_trace",
        "trace_num",
        "trace_keys",
        "partition.mode",
        "partition.num_of_partitions",
        "partition.size",
        "partition.target_size_mb",
        "partition.max_size_mb",
        "partition.max_concurrent_partitions",
        "partition.gpu_probe_sample_seed",
        "checkpoint.enabled",
        "checkpoint.strategy",
        "checkpoint.n_ops",
        "checkpoint.op_names",
        "intermediate_storage.format",
        "intermediate_storage.compression",
        "intermediate_storage.preserve_intermediate_data",
        "intermediate_storage.retention_policy",
    ):
        assert key in OVERRIDABLE_KEYS, key
    for key in ("process", "project_name", "schedule", "text_keys", "executor_type", "partition"):
        assert key not in OVERRIDABLE_KEYS


def test_nested_dotted_and_mixed_are_equivalent():
    nested = normalize_overrides({"partition": {"num_of_partitions": 4, "mode": "manual"}, "np": 2})
    dotted = normalize_overrides({"partition.num_of_partitions": 4, "partition.mode": "manual", "np": 2})
    mixed = normalize_overrides({"partition": {"num_of_partitions": 4}, "partition.mode": "manual", "np": 2})
    expected = {"partition": {"num_of_partitions": 4, "mode": "manual"}, "np": 2}
    assert nested == dotted == mixed == expected


def test_none_values_mean_not_overridden():
    out = normalize_overrides({"job_id": None, "partition": {"size": None}, "checkpoint": None, "np": 3})
    assert out == {"np": 3}
    assert normalize_overrides(None) == {}
    assert normalize_overrides({}) == {}


def test_same_value_twice_is_fine_but_conflict_is_an_error():
    assert normalize_overrides({"partition": {"size": 5}, "partition.size": 5}) == {"partition": {"size": 5}}
    with pytest.raises(RecipeError) as ei:
        normalize_overrides({"partition": {"size": 5}, "partition.size": 6})
    e = ei.value
    assert e.key == "partition.size"
    assert "5" in e.message and "6" in e.message and "twice" in e.message


def test_true_and_one_are_not_the_same_value():
    with pytest.raises(RecipeError, match="twice"):
        normalize_overrides({"checkpoint": {"n_ops": 1}, "checkpoint.n_ops": True})


def test_unknown_key_did_you_mean():
    with pytest.raises(RecipeError) as ei:
        normalize_overrides({"partition.num_of_partiton": 4})
    assert ei.value.key == "partition.num_of_partiton"
    assert "Did you mean 'partition.num_of_partitions'?" in str(ei.value)
    assert "dag_run.conf" in str(ei.value)


def test_unknown_nested_key_did_you_mean():
    with pytest.raises(RecipeError) as ei:
        normalize_overrides({"checkpoint": {"n_op": 4}})
    assert ei.value.key == "checkpoint.n_op"
    assert "checkpoint.n_ops" in str(ei.value)


def test_leaf_without_section_suggests_full_key():
    with pytest.raises(RecipeError) as ei:
        normalize_overrides({"retention_policy": "keep_all"})
    assert "intermediate_storage.retention_policy" in str(ei.value)


def test_unknown_key_without_close_match_lists_overridable_keys():
    with pytest.raises(RecipeError) as ei:
        normalize_overrides({"zzzzzz": 1}, source="--set")
    assert "Overridable keys:" in str(ei.value)
    assert "--set" in str(ei.value)


@pytest.mark.parametrize("key", ["process", "project_name", "schedule", "use_cache"])
def test_recipe_keys_that_shape_the_dag_are_not_overridable(key):
    with pytest.raises(RecipeError) as ei:
        normalize_overrides({key: "x"})
    assert ei.value.key == key
    assert "cannot be overridden" in ei.value.message
    assert "edit the recipe file" in ei.value.message


def test_unknown_key_with_none_value_is_still_reported():
    with pytest.raises(RecipeError):
        normalize_overrides({"datset_path": None})


def test_section_must_be_a_mapping():
    with pytest.raises(RecipeError) as ei:
        normalize_overrides({"partition": 4})
    assert ei.value.key == "partition"
    assert "4" in ei.value.message and "partition.mode" in ei.value.message


def test_conf_must_be_a_mapping():
    with pytest.raises(RecipeError, match="must be a mapping"):
        normalize_overrides(["np", 3])


def test_values_are_not_type_checked_here():
    # The recipe parser checks values after merging, with "(from dag_run.conf)".
    assert normalize_overrides({"np": "lots"}) == {"np": "lots"}


def test_parse_set_args_yaml_values():
    out = parse_set_args(
        [
            "partition.num_of_partitions=4",
            "skip_op_error=false",
            "checkpoint.op_names=[a, b]",
            "intermediate_storage.format=arrow",
            "np = 2",
        ]
    )
    assert out == {
        "partition": {"num_of_partitions": 4},
        "skip_op_error": False,
        "checkpoint": {"op_names": ["a", "b"]},
        "intermediate_storage": {"format": "arrow"},
        "np": 2,
    }


def test_parse_set_args_keeps_paths_and_ids_verbatim():
    out = parse_set_args(["job_id=007", "dataset_path=*.jsonl", "resume=2024-01-01", "work_dir=/a=b"])
    assert out == {"job_id": "007", "dataset_path": "*.jsonl", "resume": "2024-01-01", "work_dir": "/a=b"}


def test_parse_set_args_unparsable_yaml_falls_back_to_text():
    assert parse_set_args(["trace_keys=*x"]) == {"trace_keys": "*x"}


def test_parse_set_args_section_mapping_value():
    out = parse_set_args(["partition={mode: manual, size: 10}", "partition.target_size_mb=64"])
    assert out == {"partition": {"mode": "manual", "size": 10, "target_size_mb": 64}}
    assert normalize_overrides(out, source="--set") == out


@pytest.mark.parametrize("item", ["partition.num_of_partitions", "", 4])
def test_parse_set_args_malformed_item(item):
    with pytest.raises(RecipeError) as ei:
        parse_set_args([item])
    assert "KEY=VALUE" in str(ei.value)
    assert repr(item) in str(ei.value)


@pytest.mark.parametrize("item", ["=4", "partition..size=4", ".np=2"])
def test_parse_set_args_bad_key(item):
    with pytest.raises(RecipeError, match="dotted name"):
        parse_set_args([item])


def test_parse_set_args_conflict():
    with pytest.raises(RecipeError) as ei:
        parse_set_args(["np=2", "np=3"])
    assert ei.value.key == "np" and "twice" in ei.value.message
    assert parse_set_args(["np=2", "np=2"]) == {"np": 2}


def test_parse_set_args_empty():
    assert parse_set_args([]) == {}
    assert parse_set_args(None) == {}


def test_deep_merge_recurses_and_does_not_mutate():
    base = {"partition": {"mode": "auto", "size": 3}, "process": [{"a": None}], "np": 1}
    override = {"partition": {"size": 9}, "np": 4, "checkpoint": {"n_ops": 2}}
    merged = deep_merge(base, override)
    assert merged == {
        "partition": {"mode": "auto", "size": 9},
        "process": [{"a": None}],
        "np": 4,
        "checkpoint": {"n_ops": 2},
    }
    assert base == {"partition": {"mode": "auto", "size": 3}, "process": [{"a": None}], "np": 1}
    merged["process"].append("x")
    assert base["process"] == [{"a": None}]


def test_deep_merge_replaces_lists_and_non_mappings():
    assert deep_merge({"checkpoint": {"op_names": ["a", "b"]}}, {"checkpoint": {"op_names": ["c"]}}) == {
        "checkpoint": {"op_names": ["c"]}
    }
    assert deep_merge({"partition": None}, {"partition": {"size": 2}}) == {"partition": {"size": 2}}


def test_recipe_error_format_and_pickle():
    e = RecipeError("/r.yaml", "partition.size", "must be an integer >= 1, got 0")
    assert str(e) == "/r.yaml: partition.size: must be an integer >= 1, got 0"
    assert str(RecipeError(None, "np", "bad")) == "np: bad"
    assert str(RecipeError("/r.yaml", None, "bad")) == "/r.yaml: bad"
    assert isinstance(e, ValueError)
    e2 = pickle.loads(pickle.dumps(e))
    assert (e2.file, e2.key, e2.message, str(e2)) == (e.file, e.key, e.message, str(e))


def test_max_failed_ratio_is_overridable_and_still_validated(tmp_path):
    """Raising the failure-rate guard for one run (then resuming) needs no recipe edit; a bad value is refused."""
    import pytest

    from airflow_provider_dj.engine.config.recipe import RecipeError, load_recipe

    data = tmp_path / "in.jsonl"
    data.write_text('{"text": "a b c d e f"}\n')
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        f"project_name: guard_override\ndataset_path: {data}\nexport_path: {tmp_path / 'out.jsonl'}\n"
        f"process:\n  - whitespace_normalization_mapper:\n"
    )
    over = normalize_overrides({"max_failed_ratio": 0.9})
    assert over == {"max_failed_ratio": 0.9}
    assert load_recipe(str(recipe), over).max_failed_ratio == 0.9
    assert load_recipe(str(recipe), parse_set_args(["max_failed_ratio=1"])).max_failed_ratio == 1
    with pytest.raises(RecipeError, match="max_failed_ratio"):
        load_recipe(str(recipe), normalize_overrides({"max_failed_ratio": 1.5}))
