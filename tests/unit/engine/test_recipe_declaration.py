"""Each recipe key is declared once (engine/config/schema.py): its default, and how the effective config
writes and reads it.  Every shipped recipe round-trips through that declaration, and the parsers take
their defaults from it, not from a second spelling."""

from __future__ import annotations

import glob
import json
import os
from dataclasses import fields

import pytest

from airflow_provider_dj.engine.config import recipe_keys as K
from airflow_provider_dj.engine.config.recipe import load_recipe, parse_recipe, recipe_from_dict
from airflow_provider_dj.engine.config.schema import (
    CheckpointConfig,
    DedupHistoryConfig,
    IntermediateStorageConfig,
    PartitionConfig,
    Recipe,
    ReviewConfig,
    TracerConfig,
    default_of,
)
from airflow_provider_dj.ops.base import Op

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
SHIPPED = sorted(
    os.path.relpath(p, ROOT)
    for pattern in (
        "dags/recipes/*.yaml",
        "examples/**/*.yaml",
        "tests/dj_recipes/recipes/*.yaml",
        "tests/conformance/**/recipe*.yaml",
    )
    for p in glob.glob(os.path.join(ROOT, pattern), recursive=True)
)
#: The Data-Juicer recipes name placeholder paths; the tests run them with these (tests/dj_recipes/harness.py).
DJ_PATHS = {"dataset_path": "/data/in.jsonl", "export_path": "/data/out/result.jsonl"}


@pytest.fixture
def unchecked_op_args(monkeypatch):
    """Op arguments are not what is tested here: skip the checks that look for model files."""
    from airflow_provider_dj.engine.preflight.image_chain import register_image_chain_ops
    from airflow_provider_dj.ops import registry

    # examples/gpu_preflight names the image chain's ops; registered for this test only
    registry.op_names()  # the built-in ops, loaded on first use
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    register_image_chain_ops()
    monkeypatch.setattr(Op, "validate_args", classmethod(lambda cls, args: None))


def test_shipped_recipes_are_found():
    assert len(SHIPPED) >= 30 and any(p.startswith("dags/") for p in SHIPPED)


@pytest.mark.parametrize("path", SHIPPED)
def test_shipped_recipe_round_trips(path, unchecked_op_args):
    overrides = DJ_PATHS if "dj_recipes" in path else None
    r = load_recipe(os.path.join(ROOT, path), overrides, confine_paths=False)
    d = r.to_dict()
    text = json.dumps(d)
    back = recipe_from_dict(json.loads(text))
    assert back == r
    assert json.dumps(back.to_dict()) == text


BASE = {"dataset_path": "/data/in.jsonl", "export_path": "/data/out/r.jsonl", "process": ["lowercase_mapper"]}


def test_every_key_round_trips():
    """Sections and keys written only when not the default, all set."""
    r = parse_recipe(
        {
            **BASE,
            "process": ["lowercase_mapper", "document_deduplicator"],
            "open_tracer": True,
            "trace_keys": ["a"],
            "export_in_parallel": False,
            "export_shard_size": 10,
            "image_key": "im",
            "partition": {"mode": "manual", "size": 5, "pool": "p"},
            "checkpoint": {"strategy": "manual", "op_names": ["lowercase_mapper"]},
            "dedup_history": {"path": "/data/h", "ops": ["document_deduplicator"]},
            "review": {"max_removed_fraction": 0.5},
            "export_path": "/data/out/{{ ds }}/r.jsonl",
        },
        source_file="/data/r.yaml",
        confine_paths=False,
    )
    assert r.templates and r.dedup_history and r.review
    assert recipe_from_dict(json.loads(json.dumps(r.to_dict()))) == r


def test_keys_added_later_are_written_only_when_set():
    """An effective config written before they existed compares equal on resume."""
    d = parse_recipe(BASE, confine_paths=False).to_dict()
    for name in (
        "keep_hashes_in_res_ds",
        "export_in_parallel",
        "export_shard_size",
        "export_layout",
        "dedup_history",
        "review",
        "image_key",
        "audio_key",
        "video_key",
        "templates",
    ):
        assert name not in d
    assert recipe_from_dict(d) == parse_recipe(BASE, confine_paths=False)


def test_parsed_defaults_are_the_declared_defaults():
    r = parse_recipe(BASE, confine_paths=False)
    for cls, value in (
        (TracerConfig, r.tracer),
        (CheckpointConfig, r.checkpoint),
        (IntermediateStorageConfig, r.intermediate_storage),
    ):
        assert value == cls()
    for name in ("text_keys", "np", "executor_type", "skip_op_error", "keep_stats_in_res_ds", "image_key"):
        assert getattr(r, name) == default_of(Recipe, name)


@pytest.mark.parametrize(
    ("cls", "name", "other", "read"),
    [
        (TracerConfig, "trace_num", 7, lambda r: r.tracer.trace_num),
        (TracerConfig, "open_tracer", True, lambda r: r.tracer.open_tracer),
        (Recipe, "np", 3, lambda r: r.np),
        (Recipe, "skip_op_error", False, lambda r: r.skip_op_error),
        (Recipe, "keep_stats_in_res_ds", True, lambda r: r.keep_stats_in_res_ds),
        (Recipe, "video_key", "clips", lambda r: r.video_key),
        (PartitionConfig, "target_size_mb", 64, lambda r: r.partition.target_size_mb),
        (CheckpointConfig, "n_ops", 2, lambda r: r.checkpoint.n_ops),
        (CheckpointConfig, "strategy", "every_op", lambda r: r.checkpoint.strategy),
        (
            IntermediateStorageConfig,
            "retention_policy",
            "cleanup_all",
            lambda r: r.intermediate_storage.retention_policy,
        ),
        (IntermediateStorageConfig, "reuse_across_jobs", True, lambda r: r.intermediate_storage.reuse_across_jobs),
    ],
)
def test_parser_reads_the_declaration(monkeypatch, cls, name, other, read):
    """Changing a default in the declaration alone changes what the parser fills in."""
    monkeypatch.setattr(cls.__dataclass_fields__[name], "default", other)
    assert default_of(cls, name) == other
    assert read(parse_recipe(BASE, confine_paths=False)) == other


@pytest.mark.parametrize(
    ("cls", "name", "other", "section"),
    [
        (ReviewConfig, "sample_rows", 9, "review"),
        (ReviewConfig, "on_timeout", "approve", "review"),
        (DedupHistoryConfig, "memory_mb", 64, "dedup_history"),
    ],
)
def test_section_parsers_read_the_declaration(monkeypatch, cls, name, other, section):
    monkeypatch.setattr(cls.__dataclass_fields__[name], "default", other)
    data = {
        **BASE,
        "process": ["document_deduplicator"],
        "review": {"max_removed_fraction": 0.5},
        "dedup_history": {"path": "/data/h", "ops": ["document_deduplicator"]},
    }
    assert getattr(getattr(parse_recipe(data, confine_paths=False), section), name) == other


@pytest.mark.parametrize(
    ("cls", "keys"),
    [
        (PartitionConfig, K.PARTITION_FIELDS),
        (CheckpointConfig, K.CHECKPOINT_FIELDS),
        (IntermediateStorageConfig, K.STORAGE_FIELDS),
        (TracerConfig, K.TRACER_KEYS),
        (DedupHistoryConfig, K.DEDUP_HISTORY_FIELDS),
        (ReviewConfig, K.REVIEW_FIELDS),
    ],
)
def test_key_tables_name_the_model_fields(cls, keys):
    """recipe_keys.py's section tables (which keys a recipe may write) are the model's fields."""
    assert tuple(f.name for f in fields(cls) if f.name != "extra") == keys
