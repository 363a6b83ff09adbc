"""Recipe loading and validation: every error names the file, the key path and the bad value."""

from __future__ import annotations

import json
import os
import pickle
import sys
from typing import Any

import pytest
import yaml

from airflow_provider_dj.engine.config.recipe import (
    CheckpointConfig,
    IntermediateStorageConfig,
    PartitionConfig,
    Recipe,
    RecipeError,
    TracerConfig,
    check_input_exists,
    load_recipe,
    parse_recipe,
    recipe_from_dict,
    sanitize_dag_id,
)
from airflow_provider_dj.ops import registry
from airflow_provider_dj.ops.base import Deduplicator, Filter, Mapper


# Stand-ins with the real ops' names and argument types, used only while the op
# modules are not all importable yet (they are written concurrently).
class _FakeCleanEmail(Mapper):
    name = "clean_email_mapper"

    def __init__(self, *, pattern: str | None = None, repl: str = "", **common: Any) -> None:
        super().__init__(**common)


class _FakeWhitespace(Mapper):
    name = "whitespace_normalization_mapper"


class _FakeWordsNum(Filter):
    name = "words_num_filter"

    def __init__(self, *, min_num: int = 10, max_num: int = sys.maxsize, **common: Any) -> None:
        super().__init__(**common)


class _FakeTextLength(Filter):
    name = "text_length_filter"

    def __init__(self, *, min_len: int = 10, max_len: int = sys.maxsize, **common: Any) -> None:
        super().__init__(**common)


class _FakeDocDedup(Deduplicator):
    name = "document_deduplicator"

    def __init__(self, *, lowercase: bool = False, ignore_non_character: bool = False, **common: Any) -> None:
        super().__init__(**common)


@pytest.fixture(autouse=True)
def _ops(monkeypatch):
    try:
        registry.load_builtin_ops()
    except ImportError:
        monkeypatch.setattr(registry, "_loaded", True)
        for cls in (_FakeCleanEmail, _FakeWhitespace, _FakeWordsNum, _FakeTextLength, _FakeDocDedup):
            if cls.name not in registry._REGISTRY:
                monkeypatch.setitem(registry._REGISTRY, cls.name, cls)


def base_data(**changes: Any) -> dict:
    data = {
        "project_name": "demo",
        "dataset_path": "data/in.jsonl",
        "export_path": "out/result.jsonl",
        "process": [
            {"whitespace_normalization_mapper": None},
            {"words_num_filter": {"min_num": 5, "max_num": 1000}},
            {"document_deduplicator": {"lowercase": True}},
            "clean_email_mapper",
        ],
    }
    data.update(changes)
    return data


def write(tmp_path, data, name="recipe.yaml") -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data) if not isinstance(data, str) else data)
    return str(path)


def load_error(tmp_path, data, **kw) -> RecipeError:
    path = write(tmp_path, data)
    with pytest.raises(RecipeError) as ei:
        load_recipe(path, **kw)
    e = ei.value
    assert e.file == path and str(e).startswith(path + ": ")
    return e


# --------------------------------------------------------------------------
# Happy path, defaults, paths
# --------------------------------------------------------------------------
def test_defaults_and_relative_paths(tmp_path):
    path = write(tmp_path, base_data())
    r = load_recipe(path)
    assert r.source_file == path
    assert r.project_name == "demo"
    assert r.dataset_path == str(tmp_path / "data" / "in.jsonl")
    assert r.export_path == str(tmp_path / "out" / "result.jsonl")
    assert r.work_dir == str(tmp_path / "out")
    assert r.text_keys == ("text",) and r.text_key == "text"
    assert r.np == 4
    assert r.executor_type == "ray_partitioned"
    assert [(op.index, op.name, op.args) for op in r.process] == [
        (0, "whitespace_normalization_mapper", {}),
        (1, "words_num_filter", {"min_num": 5, "max_num": 1000}),
        (2, "document_deduplicator", {"lowercase": True}),
        (3, "clean_email_mapper", {}),
    ]
    assert r.partition.mode == "auto" and r.partition.num_of_partitions is None
    assert r.partition.target_size_mb == 256 and r.partition.max_concurrent_partitions is None
    assert r.partition.extra["max_gpu_workers_per_device"] == 5
    assert r.partition.extra["partitions_per_node"] == "auto"
    assert r.checkpoint == CheckpointConfig()
    assert r.intermediate_storage == IntermediateStorageConfig()
    assert r.tracer == TracerConfig()
    assert r.skip_op_error is True and r.keep_stats_in_res_ds is False
    assert r.job_id is None and r.resume is None and r.schedule is None
    assert r.ignored_keys == ()


def test_project_name_defaults_to_file_stem(tmp_path):
    data = base_data()
    del data["project_name"]
    assert load_recipe(write(tmp_path, data, "my-recipe.yaml")).project_name == "my-recipe"
    assert parse_recipe(data, base_dir=str(tmp_path)).project_name == "dj_recipe"


def test_absolute_urls_home_and_work_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    r = parse_recipe(
        base_data(dataset_path="s3://bucket/in/*.parquet", export_path="~/out/r.parquet", work_dir="../jobs"),
        base_dir=str(tmp_path / "sub"),
    )
    assert r.dataset_path == "s3://bucket/in/*.parquet"
    assert r.export_path == str(tmp_path / "home" / "out" / "r.parquet")
    assert r.work_dir == str(tmp_path / "jobs")
    r2 = parse_recipe(base_data(export_path="s3://b/out/r.jsonl"), base_dir=str(tmp_path))
    assert r2.work_dir == "s3://b/out"


def test_parse_without_base_dir_uses_cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = parse_recipe(base_data())
    assert r.dataset_path == os.path.join(str(tmp_path), "data", "in.jsonl")


@pytest.mark.parametrize(
    "ds",
    [
        "/d/in.json",
        "/d/in.jsonl.gz",
        "/d/in.jsonl.zst",
        "/d/x.parquet",
        "/d/dir",
        "/d/dir/",
        "/d/corpus.v2",
        "/d/*.jsonl",
        "/d/part-*",
    ],
)
def test_accepted_dataset_paths(ds):
    assert parse_recipe(base_data(dataset_path=ds)).dataset_path.startswith("/d/")


@pytest.mark.parametrize("out", ["/o/r.jsonl", "/o/r.json", "/o/r.PARQUET"])
def test_accepted_export_paths(out):
    assert parse_recipe(base_data(export_path=out)).export_path == out


def test_text_keys_string_or_list(tmp_path):
    assert parse_recipe(base_data(text_keys="content")).text_keys == ("content",)
    r = parse_recipe(base_data(text_keys=["body", "title"]))
    assert r.text_keys == ("body", "title") and r.text_key == "body"


def test_dj_global_keys_are_ignored_and_recorded(tmp_path):
    r = load_recipe(
        write(
            tmp_path,
            base_data(
                use_cache=True,
                open_monitor=False,
                export_shard_size=0,
                op_fusion=False,
                suffixes=[],
                event_logging={"enabled": True},
            ),
        )
    )
    # export_shard_size is an export key now (honoured: 0 is one file; engine/output/fields.py), not ignored
    assert r.ignored_keys == ("event_logging", "op_fusion", "open_monitor", "suffixes", "use_cache")


def test_config_all_style_partition_keys_go_to_extra():
    r = parse_recipe(
        base_data(
            partition={
                "mode": "auto",
                "num_of_partitions": "auto",
                "partitions_per_node": 3,
                "max_concurrent_partitions": "auto",
                "gpu_probe_timeout_seconds": 30,
                "execution_group_size": "auto",
                "size": None,
            }
        )
    )
    assert r.partition.num_of_partitions is None and r.partition.max_concurrent_partitions is None
    assert r.partition.extra["partitions_per_node"] == 3
    assert r.partition.extra["gpu_probe_timeout_seconds"] == 30
    assert r.partition.extra["gpu_probe_sample_seed"] == 42
    seeded = parse_recipe(base_data(partition={"gpu_probe_sample_seed": None, "max_gpu_workers_per_device": None}))
    assert seeded.partition.extra["gpu_probe_sample_seed"] is None  # null = fresh sample each run
    assert seeded.partition.extra["max_gpu_workers_per_device"] == 5  # null = default


def test_null_means_default():
    r = parse_recipe(base_data(np=None, checkpoint={"n_ops": None}, text_keys=None))
    assert r.np == 4 and r.checkpoint.n_ops == 5 and r.text_keys == ("text",)


def test_manual_partitions_default_count_and_legacy_partition_size():
    assert parse_recipe(base_data(partition={"mode": "manual"})).partition.num_of_partitions == 4
    r = parse_recipe(base_data(partition={"mode": "manual"}, partition_size=100))
    assert r.partition.size == 100 and r.partition.num_of_partitions is None


def test_storage_compression_default_depends_on_format():
    assert parse_recipe(base_data()).intermediate_storage.compression == "snappy"
    assert parse_recipe(base_data(intermediate_storage={"format": "arrow"})).intermediate_storage.compression == "none"
    s = parse_recipe(base_data(intermediate_storage={"format": "jsonl", "compression": "zstd"})).intermediate_storage
    assert (s.format, s.compression) == ("jsonl", "zstd")


def test_checkpoint_disabled_normalization():
    r = parse_recipe(base_data(checkpoint={"enabled": False, "strategy": "every_op"}))
    assert r.checkpoint.enabled is False and r.checkpoint.strategy == "disabled"
    r = parse_recipe(base_data(checkpoint={"strategy": "disabled"}))
    assert r.checkpoint.enabled is False
    r = parse_recipe(base_data(checkpoint={"strategy": "manual", "op_names": ["words_num_filter"]}))
    assert r.checkpoint.op_names == ("words_num_filter",)


def test_resume_implies_job_id_and_schedule():
    r = parse_recipe(base_data(resume="job-1", schedule="0 3 * * *"))
    assert r.job_id == "job-1" and r.resume == "job-1" and r.schedule == "0 3 * * *"
    assert parse_recipe(base_data(job_id="a.b_c-1", resume="a.b_c-1", schedule="@daily")).schedule == "@daily"


def test_executor_type_ray_partitioned_accepted():
    assert parse_recipe(base_data(executor_type="ray_partitioned")).executor_type == "ray_partitioned"


def test_to_dict_round_trip_and_json(tmp_path):
    r = load_recipe(
        write(
            tmp_path,
            base_data(
                use_cache=True,
                partition={"mode": "manual", "size": 10, "max_gpu_workers_per_device": 2},
                checkpoint={"strategy": "manual", "op_names": ["document_deduplicator"]},
                open_tracer=True,
                op_list_to_trace=["words_num_filter"],
                trace_keys=["id"],
                job_id="j1",
                schedule="@hourly",
            ),
        )
    )
    d = r.to_dict()
    assert json.loads(json.dumps(d)) == d
    assert d["partition"]["max_gpu_workers_per_device"] == 2 and d["partition"]["size"] == 10
    back = recipe_from_dict(json.loads(json.dumps(d)))
    assert back == r
    assert back.to_dict() == d
    assert pickle.loads(pickle.dumps(r)) == r


def test_recipe_from_dict_rejects_garbage():
    with pytest.raises(RecipeError, match="not a serialized recipe"):
        recipe_from_dict({"project_name": "x"})


def test_sanitize_dag_id():
    assert sanitize_dag_id("my project/v2:ü") == "my_project_v2__"
    assert sanitize_dag_id("ok_name-1.2") == "ok_name-1.2"


# --------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------
def test_missing_file_and_bad_yaml(tmp_path):
    with pytest.raises(RecipeError, match="not found") as ei:
        load_recipe(tmp_path / "nope.yaml")
    assert ei.value.file == str(tmp_path / "nope.yaml")
    e = load_error(tmp_path, "process: [\n")
    assert "invalid YAML" in e.message
    assert "empty" in load_error(tmp_path, "").message
    assert "mapping" in load_error(tmp_path, "- a\n- b\n").message


def test_unknown_top_level_key_did_you_mean(tmp_path):
    e = load_error(tmp_path, base_data(dataset_pth="x.jsonl"))
    assert e.key == "dataset_pth"
    assert "Did you mean 'dataset_path'?" in e.message


def test_executor_type_other_than_ray_partitioned(tmp_path):
    for value in ("default", "ray"):
        e = load_error(tmp_path, base_data(executor_type=value))
        assert e.key == "executor_type" and repr(value) in e.message
        assert "executor_type: ray_partitioned" in e.message


@pytest.mark.parametrize("process", [None, []])
def test_process_required(tmp_path, process):
    e = load_error(tmp_path, base_data(process=process))
    assert e.key == "process" and "non-empty" in e.message


def test_process_must_be_list(tmp_path):
    e = load_error(tmp_path, base_data(process={"words_num_filter": {}}))
    assert e.key == "process" and "list" in e.message


def test_process_entry_not_single_key_map(tmp_path):
    e = load_error(tmp_path, base_data(process=["clean_email_mapper", {"a": 1, "b": 2}]))
    assert e.key == "process[1]" and "single-key" in e.message and "'a': 1" in e.message


def test_process_args_not_a_mapping(tmp_path):
    e = load_error(tmp_path, base_data(process=[{"words_num_filter": [1, 2]}]))
    assert e.key == "process[0].words_num_filter" and "[1, 2]" in e.message


def test_unknown_op_did_you_mean(tmp_path):
    e = load_error(tmp_path, base_data(process=["clean_email_mapper", {"word_num_filter": {"min_num": 1}}]))
    assert e.key == "process[1]"
    assert "'word_num_filter'" in e.message and "Did you mean 'words_num_filter'?" in e.message


def test_unknown_op_argument_did_you_mean(tmp_path):
    e = load_error(tmp_path, base_data(process=["clean_email_mapper", {"words_num_filter": {"min_nm": 1}}]))
    assert e.key == "process[1].words_num_filter.min_nm"
    assert "Did you mean 'min_num'?" in e.message


def test_op_argument_wrong_type(tmp_path):
    e = load_error(tmp_path, base_data(process=[{"words_num_filter": {"min_num": "ten"}}]))
    assert e.key == "process[0].words_num_filter.min_num"
    assert "'ten'" in e.message
    assert str(e).startswith(f"{e.file}: process[0].words_num_filter.min_num: ")


@pytest.mark.parametrize(
    "key,value,fragment",
    [
        ("np", 0, "integer >= 1"),
        ("np", True, "integer >= 1"),
        ("np", 2.0, "integer >= 1"),
        ("skip_op_error", "yes", "true or false"),
        ("keep_stats_in_res_ds", 1, "true or false"),
        ("open_tracer", "on", "true or false"),
        ("trace_num", 0, "integer >= 1"),
        ("trace_keys", [1], "list of non-empty strings"),
        ("text_keys", [], "at least one field"),
        ("text_keys", 5, "list of non-empty strings"),
        ("project_name", 2024, "string"),
    ],
)
def test_top_level_value_errors(tmp_path, key, value, fragment):
    e = load_error(tmp_path, base_data(**{key: value}))
    assert e.key == key and fragment in e.message
    if value != []:
        assert repr(value) in e.message


@pytest.mark.parametrize(
    "section,key,value,fragment",
    [
        ("partition", "mode", "manul", "auto, manual"),
        ("partition", "num_of_partitions", 0, 'integer >= 1 or "auto" or null'),
        ("partition", "num_of_partitions", "many", "integer >= 1"),
        ("partition", "size", -3, "integer >= 1"),
        ("partition", "target_size_mb", 0, "integer >= 1"),
        ("partition", "max_concurrent_partitions", True, "integer >= 1"),
        ("partition", "max_size_mb", 0, "integer >= 1"),
        ("partition", "partitions_per_node", 0, 'integer >= 1 or "auto"'),
        ("partition", "gpu_preflight_enabled", "no", "true or false"),
        ("partition", "gpu_probe_timeout_seconds", -1, "positive number"),
        ("partition", "gpu_probe_sample_seed", "x", "integer or null"),
        ("partition", "gpu_probe_warmup_batches", -1, "integer >= 0"),
        ("partition", "max_initialization_overhead_ratio", 2, "(0, 1]"),
        ("checkpoint", "enabled", "true", "true or false"),
        ("checkpoint", "strategy", "every_n_op", "every_op, every_n_ops, manual, disabled"),
        ("checkpoint", "n_ops", 0, "integer >= 1"),
        ("intermediate_storage", "format", "csv", "parquet, arrow, jsonl"),
        ("intermediate_storage", "compression", "lzma", "snappy, gzip, zstd, none"),
        ("intermediate_storage", "preserve_intermediate_data", "y", "true or false"),
        ("intermediate_storage", "retention_policy", "keep", "keep_all, keep_failed_only, cleanup_all"),
    ],
)
def test_section_value_errors(tmp_path, section, key, value, fragment):
    e = load_error(tmp_path, base_data(**{section: {key: value}}))
    assert e.key == f"{section}.{key}"
    assert fragment in e.message and repr(value) in e.message


def test_enum_did_you_mean(tmp_path):
    e = load_error(tmp_path, base_data(checkpoint={"strategy": "every_n_op"}))
    assert "Did you mean 'every_n_ops'?" in e.message


def test_compression_must_fit_format(tmp_path):
    e = load_error(tmp_path, base_data(intermediate_storage={"format": "arrow", "compression": "snappy"}))
    assert e.key == "intermediate_storage.compression"
    assert "'snappy'" in e.message and "arrow" in e.message and "zstd, none" in e.message


def test_unknown_section_key_did_you_mean(tmp_path):
    e = load_error(tmp_path, base_data(partition={"num_partitions": 4}))
    assert e.key == "partition.num_partitions" and "Did you mean 'num_of_partitions'?" in e.message
    e = load_error(tmp_path, base_data(intermediate_storage={"formt": "arrow"}))
    assert e.key == "intermediate_storage.formt" and "'format'" in e.message


def test_section_not_a_mapping(tmp_path):
    e = load_error(tmp_path, base_data(checkpoint=True))
    assert e.key == "checkpoint" and "True" in e.message


def test_manual_mode_count_and_size_exclusive(tmp_path):
    e = load_error(tmp_path, base_data(partition={"mode": "manual", "num_of_partitions": 3, "size": 10}))
    assert e.key == "partition" and "3" in e.message and "10" in e.message and "not both" in e.message


def test_legacy_partition_size_conflict(tmp_path):
    e = load_error(tmp_path, base_data(partition_size=5, partition={"size": 6}))
    assert e.key == "partition_size" and "partition.size" in e.message


def test_max_size_below_target(tmp_path):
    e = load_error(tmp_path, base_data(partition={"target_size_mb": 128, "max_size_mb": 64}))
    assert e.key == "partition.max_size_mb" and "64" in e.message and "128" in e.message


def test_checkpoint_op_names_must_be_in_process(tmp_path):
    e = load_error(
        tmp_path, base_data(checkpoint={"strategy": "manual", "op_names": ["words_num_filter", "document_dedup"]})
    )
    assert e.key == "checkpoint.op_names[1]"
    assert "'document_dedup'" in e.message and "Did you mean 'document_deduplicator'?" in e.message
    assert "whitespace_normalization_mapper" in e.message  # lists the process ops


def test_manual_checkpoint_needs_op_names(tmp_path):
    e = load_error(tmp_path, base_data(checkpoint={"strategy": "manual"}))
    assert e.key == "checkpoint.op_names" and "manual" in e.message and "words_num_filter" in e.message


def test_op_list_to_trace_must_be_in_process(tmp_path):
    e = load_error(tmp_path, base_data(op_list_to_trace=["text_length_filter"]))
    assert e.key == "op_list_to_trace[0]" and "'text_length_filter'" in e.message


@pytest.mark.parametrize("key", ["dataset_path", "export_path"])
def test_paths_required(tmp_path, key):
    data = base_data()
    del data[key]
    e = load_error(tmp_path, data)
    assert e.key == key and "required" in e.message


@pytest.mark.parametrize("value", ["0.5 a.jsonl 0.5 b.jsonl", "a.jsonl b.jsonl"])
def test_dataset_mixture_rejected(tmp_path, value):
    e = load_error(tmp_path, base_data(dataset_path=value))
    assert e.key == "dataset_path" and repr(value) in e.message
    assert "mixture" in e.message and "glob" in e.message


def test_dataset_path_with_space_is_one_path(tmp_path):
    r = parse_recipe(base_data(dataset_path="my data/in.jsonl"), base_dir=str(tmp_path))
    assert r.dataset_path == str(tmp_path / "my data" / "in.jsonl")


@pytest.mark.parametrize("value", ["/d/in.csv", "/d/in.txt", "/d/*.csv", "s3://b/x.tar"])
def test_dataset_unsupported_suffix(tmp_path, value):
    e = load_error(tmp_path, base_data(dataset_path=value))
    assert e.key == "dataset_path" and repr(value) in e.message and ".jsonl" in e.message


@pytest.mark.parametrize("value", ["/o/result.csv", "/o/dir", "/o/*.jsonl", "/o/r.jsonl.gz"])
def test_export_path_suffix(tmp_path, value):
    e = load_error(tmp_path, base_data(export_path=value))
    assert e.key == "export_path" and repr(value) in e.message and ".parquet" in e.message


def test_export_path_must_differ_from_input(tmp_path):
    e = load_error(tmp_path, base_data(dataset_path="x.jsonl", export_path="./x.jsonl"))
    assert e.key == "export_path" and "dataset_path" in e.message


@pytest.mark.parametrize("key", ["job_id", "resume"])
@pytest.mark.parametrize("value", ["../etc", "a/b", ".hidden", "a..b", "x" * 129, "white space", 7])
def test_unsafe_ids(tmp_path, key, value):
    e = load_error(tmp_path, base_data(**{key: value}))
    assert e.key == key and repr(value) in e.message


def test_job_id_and_resume_must_match(tmp_path):
    e = load_error(tmp_path, base_data(job_id="a", resume="b"))
    assert e.key == "resume" and "'a'" in e.message and "'b'" in e.message


@pytest.mark.parametrize(
    "value,fragment", [("@dayly", "Did you mean '@daily'?"), ("every day", "cron"), ("61 * * * *", "cron")]
)
def test_bad_schedule(tmp_path, value, fragment):
    e = load_error(tmp_path, base_data(schedule=value))
    assert e.key == "schedule" and repr(value) in e.message and fragment in e.message


# --------------------------------------------------------------------------
# Overrides
# --------------------------------------------------------------------------
def test_nested_and_dotted_overrides_equivalent(tmp_path):
    path = write(tmp_path, base_data())
    a = load_recipe(path, {"partition": {"mode": "manual", "num_of_partitions": 8}, "np": 2})
    b = load_recipe(path, {"partition.mode": "manual", "partition.num_of_partitions": 8, "np": 2})
    assert a == b
    assert a.partition.num_of_partitions == 8 and a.np == 2


def test_override_paths_resolve_against_recipe_dir(tmp_path):
    r = load_recipe(write(tmp_path, base_data()), {"dataset_path": "other/*.parquet", "job_id": "run-7"})
    assert r.dataset_path == str(tmp_path / "other" / "*.parquet") and r.job_id == "run-7"


def test_override_none_keeps_recipe_value(tmp_path):
    r = load_recipe(write(tmp_path, base_data(np=3)), {"np": None, "partition": {"size": None}})
    assert r.np == 3


def test_bad_override_value_is_marked(tmp_path):
    e = load_error(tmp_path, base_data(), overrides={"partition": {"num_of_partitions": 0}})
    assert e.key == "partition.num_of_partitions" and "0" in e.message
    assert e.message.endswith("(from dag_run.conf)")
    e = load_error(tmp_path, base_data(), overrides={"np": "x"}, override_source="--set")
    assert e.message.endswith("(from --set)")


def test_recipe_value_error_is_not_marked(tmp_path):
    e = load_error(tmp_path, base_data(np=0), overrides={"partition.size": 4})
    assert "(from" not in e.message


def test_unknown_override_key_names_file(tmp_path):
    e = load_error(tmp_path, base_data(), overrides={"partition.num_of_partiton": 2})
    assert e.key == "partition.num_of_partiton" and "Did you mean 'partition.num_of_partitions'?" in e.message


def test_override_of_one_manual_sizing_key_replaces_the_other(tmp_path):
    path = write(tmp_path, base_data(partition={"mode": "manual", "size": 100}))
    r = load_recipe(path, {"partition.num_of_partitions": 6})
    assert (r.partition.num_of_partitions, r.partition.size) == (6, None)


def test_override_checkpoint_op_names_checked_against_process(tmp_path):
    e = load_error(tmp_path, base_data(), overrides={"checkpoint": {"strategy": "manual", "op_names": ["nope"]}})
    assert e.key == "checkpoint.op_names[0]" and e.message.endswith("(from dag_run.conf)")


# --------------------------------------------------------------------------
# check_input_exists (run-time only)
# --------------------------------------------------------------------------
def test_parsing_never_touches_the_data(tmp_path):
    r = parse_recipe(base_data(dataset_path=str(tmp_path / "missing" / "*.jsonl")))
    with pytest.raises(RecipeError) as ei:
        check_input_exists(r)
    assert ei.value.key == "dataset_path" and "matches no input files" in ei.value.message


def test_check_input_exists_file_dir_glob(tmp_path):
    (tmp_path / "d" / "sub").mkdir(parents=True)
    (tmp_path / "d" / "README.md").write_text("x")
    for ds in ("d", "d/*.jsonl"):
        with pytest.raises(RecipeError):
            check_input_exists(parse_recipe(base_data(dataset_path=ds), base_dir=str(tmp_path)))
    (tmp_path / "d" / "sub" / "a.jsonl").write_text("{}\n")
    for ds in ("d", "d/**/*.jsonl", "d/sub/a.jsonl"):
        check_input_exists(parse_recipe(base_data(dataset_path=ds), base_dir=str(tmp_path)))


def test_check_input_exists_url(tmp_path):
    (tmp_path / "a.parquet").write_bytes(b"x")
    check_input_exists(parse_recipe(base_data(dataset_path=f"file://{tmp_path}/*.parquet")))
    with pytest.raises(RecipeError):
        check_input_exists(parse_recipe(base_data(dataset_path=f"file://{tmp_path}/none.parquet")))


def test_public_model_types():
    assert PartitionConfig().extra == {} and PartitionConfig().mode == "auto"
    assert Recipe.__dataclass_params__.frozen


# -- dedup_history (docs/nightly.md#deduplication-against-history) -----------------------------------------
def _history_recipe(history: dict, process=None) -> dict:
    return {
        "dataset_path": "/in/data.jsonl",
        "export_path": "/out/result.jsonl",
        "process": process or [{"document_deduplicator": {"lowercase": True}}],
        "dedup_history": history,
    }


def test_dedup_history_is_parsed_and_round_trips():
    from airflow_provider_dj.engine.config.recipe import parse_recipe
    from airflow_provider_dj.engine.config.schema import recipe_from_dict

    r = parse_recipe(
        _history_recipe({"path": "hist", "ops": ["document_deduplicator"]}), source_file=None, base_dir="/b"
    )
    assert (r.dedup_history.path, r.dedup_history.ops, r.dedup_history.memory_mb) == (
        "/b/hist",
        ("document_deduplicator",),
        256,
    )
    assert recipe_from_dict(r.to_dict()) == r
    plain = parse_recipe({k: v for k, v in _history_recipe({}).items() if k != "dedup_history"}, source_file=None)
    assert plain.dedup_history is None and "dedup_history" not in plain.to_dict()  # older job dirs compare equal


@pytest.mark.parametrize(
    "history, process, key, words",
    [
        ({"ops": ["document_deduplicator"]}, None, "dedup_history.path", "is required"),
        ({"path": "s3://b/h", "ops": ["document_deduplicator"]}, None, "dedup_history.path", "local-only"),
        ({"path": "h"}, None, "dedup_history.ops", "name the deduplicators"),
        ({"path": "h", "ops": ["document_simhash_deduplicator"]}, None, "dedup_history.ops[0]", "cannot check"),
        (
            {"path": "h", "ops": ["document_deduplicator"]},
            ["document_deduplicator", "document_deduplicator"],
            "dedup_history.ops[0]",
            "appears 2 times",
        ),
        ({"path": "h", "ops": ["document_deduplicator"], "memory_mb": 1}, None, "dedup_history.memory_mb", ""),
        ({"path": "h", "ops": ["document_deduplicator"], "mem": 1}, None, "dedup_history.mem", "unknown key"),
    ],
)
def test_dedup_history_bad_values_are_refused_naming_the_key(history, process, key, words):
    from airflow_provider_dj.engine.config.recipe import parse_recipe
    from airflow_provider_dj.engine.config.schema import RecipeError

    with pytest.raises(RecipeError) as err:
        parse_recipe(_history_recipe(history, process), source_file=None, base_dir="/b")
    assert err.value.key == key and words in str(err.value)
