"""Exports keep fields as Data-Juicer 1.6.1's exporter does (engine/output/fields.py).

The expected exports come from Data-Juicer itself (tests/conformance/export_fields,
made by its default executor in its own venv); here our engine runs the same
recipe on the same input -- real files, prepare_job / run_segment / export_job --
and every export path is compared with them: sequential JSONL, JSONL serialized
per partition (the part files the Ray workers write, made here by calling the
workers' function in-process) and Parquet.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from airflow_provider_dj.engine.config.recipe import RecipeError, load_recipe
from airflow_provider_dj.engine.execution.segment_runner import run_segment
from airflow_provider_dj.engine.job.export import export_job
from airflow_provider_dj.engine.job.setup import prepare_job
from airflow_provider_dj.engine.output.fields import (
    DJ_FIELD_NAMES,
    ENGINE_COLUMN_PREFIXES,
    ENGINE_COLUMNS,
    clean_for_export,
    dropped_columns,
)
from airflow_provider_dj.engine.output.parts import write_part
from tests.helpers_compare import assert_same_bytes

FIX = Path(__file__).parents[2] / "conformance" / "export_fields"
SPEC = json.loads((FIX / "variants.json").read_text(encoding="utf-8"))
PARTS = 2


def read_jsonl(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _job(tmp_path: Path, name: str, keys: dict, suffix: str) -> tuple[str, Path]:
    out = tmp_path / f"{name}.{suffix}"
    recipe = {
        "project_name": f"ef_{name}",
        "dataset_path": str(FIX / "input.jsonl"),
        "export_path": str(out),
        "work_dir": str(tmp_path / "work"),
        "partition": {"mode": "manual", "num_of_partitions": PARTS},
        "process": SPEC["process"],
        **keys,
    }
    if suffix != "jsonl":
        recipe.pop("export_type", None)
    path = tmp_path / f"{name}_{suffix}.yaml"
    path.write_text(yaml.safe_dump(recipe), encoding="utf-8")
    job = prepare_job(load_recipe(path), job_id=f"{name}-{suffix}")
    for pid in range(PARTS):
        run_segment(job.job_dir, 0, pid)
    return job.job_dir, out


@pytest.mark.parametrize("variant", sorted(SPEC["variants"]))
def test_jsonl_exports_keep_the_fields_data_juicer_keeps(tmp_path: Path, variant: str) -> None:
    expected = read_jsonl(FIX / "expected" / f"{variant}.jsonl")
    job_dir, out = _job(tmp_path, variant, SPEC["variants"][variant], "jsonl")
    summary = export_job(job_dir)
    got = read_jsonl(out)
    assert got == expected
    assert summary["export"]["rows"] == len(expected) == 3
    sequential = out.read_bytes()

    # The parallel path: each partition's part file, copied in order, must give the same bytes.
    parts_made: list[int] = []

    def part_source():
        for pid in range(PARTS):
            parts_made.append(pid)
            yield write_part(job_dir, pid)

    out.unlink()
    export_job(job_dir, part_source=part_source)
    assert_same_bytes(out.read_bytes(), sequential)
    in_parallel = SPEC["variants"][variant].get("export_in_parallel", True)
    assert parts_made == ([0, 1] if in_parallel else [])  # export_in_parallel: false serializes in-process


@pytest.mark.parametrize("variant", ["default", "keep_stats", "keep_both"])
def test_parquet_export_keeps_the_same_fields(tmp_path: Path, variant: str) -> None:
    expected = read_jsonl(FIX / "expected" / f"{variant}.jsonl")
    job_dir, out = _job(tmp_path, variant, SPEC["variants"][variant], "parquet")
    export_job(job_dir)
    table = pq.read_table(out)
    assert sorted(table.column_names) == sorted(expected[0])
    assert table.to_pylist() == [{k: r[k] for k in table.column_names} for r in expected]


def test_suffix_field_survives_and_engine_columns_never_do(tmp_path: Path) -> None:
    job_dir, out = _job(tmp_path, "plain", {}, "jsonl")
    export_job(job_dir)
    rows = read_jsonl(out)
    assert [r["__dj__suffix__"] for r in rows] == [".txt", ".txt", ".txt"]
    assert not [k for r in rows for k in r if k in ENGINE_COLUMNS or k.startswith(ENGINE_COLUMN_PREFIXES)]


def test_drop_rule_by_flags() -> None:
    names = [
        "text",
        "__dj__suffix__",
        "__dj__stats__",
        "__dj__meta__",
        "__dj__hash",
        "__dj__minhash",
        "__dj__uid",
        "__dj__input_row__",
        "__dj__row_error__",
        "__dj__delta_set__text",
        "__dj__is_unique",
    ]
    engine = ["__dj__input_row__", "__dj__row_error__", "__dj__delta_set__text"]
    assert dropped_columns(names, keep_stats=False, keep_hashes=False) == [
        "__dj__stats__",
        "__dj__meta__",
        "__dj__hash",
        "__dj__minhash",
        *engine,
    ]
    assert dropped_columns(names, keep_stats=True, keep_hashes=False) == ["__dj__hash", "__dj__minhash", *engine]
    assert dropped_columns(names, keep_stats=False, keep_hashes=True) == ["__dj__stats__", "__dj__meta__", *engine]
    assert dropped_columns(names, keep_stats=True, keep_hashes=True) == engine
    table = pa.table({n: [1] for n in names})
    assert clean_for_export(table, True, True).column_names == [n for n in names if n not in engine]


def test_every_dj_name_in_the_package_is_classified() -> None:
    """A "__dj__..." column name in our code is either one of the engine's own (never
    exported) or a field Data-Juicer defines (exported by its rules).  A new internal
    column must be added to ENGINE_COLUMNS, or it would leak into every export."""
    root = Path(__file__).parents[3] / "airflow_provider_dj"
    found = set()
    for path in root.rglob("*.py"):
        found |= set(re.findall(r"[\"'](__dj__[A-Za-z0-9_]+)[\"']", path.read_text(encoding="utf-8")))
    unknown = sorted(
        n
        for n in found
        if n not in ENGINE_COLUMNS and n not in DJ_FIELD_NAMES and not n.startswith(ENGINE_COLUMN_PREFIXES)
    )
    assert not unknown, (
        f"classify these: ENGINE_COLUMNS in ops/columns.py or DJ_FIELD_NAMES in engine/output/fields.py: {unknown}"
    )
    assert "__dj__input_row__" in found and "__dj__suffix__" in found  # the scan sees both kinds
    from airflow_provider_dj.engine.execution.batch_cursor import KEY_COLUMN, REASON_COLUMN
    from airflow_provider_dj.engine.execution.segment_runner import INPUT_ROW_COLUMN
    from airflow_provider_dj.engine.storage import checkpoints

    assert {checkpoints.DELTA_KEEP_COLUMN, KEY_COLUMN, REASON_COLUMN, INPUT_ROW_COLUMN} <= ENGINE_COLUMNS
    assert checkpoints.PATCH_FLAG_PREFIX in ENGINE_COLUMN_PREFIXES


def _recipe(
    tmp_path: Path, extra: str, process: str = "  - text_length_filter: {min_len: 3}\n", export: str = "out.jsonl"
) -> Path:
    (tmp_path / "in.jsonl").write_text('{"text": "abcdef"}\n')
    p = tmp_path / "r.yaml"
    p.write_text(f"dataset_path: {tmp_path}/in.jsonl\nexport_path: {tmp_path}/{export}\n{extra}process:\n{process}")
    return p


@pytest.mark.parametrize(
    "extra, key, needle",
    [
        ("export_shard_size: 1.5\n", "export_shard_size", "whole number of bytes per shard"),
        ("export_shard_size: big\n", "export_shard_size", "whole number of bytes per shard"),
        ("export_type: parquet\n", "export_type", "contradicts export_path"),
        ("export_type: csv\n", "export_type", "must be one of jsonl, json, parquet"),
        ("encrypt_before_export: true\n", "encrypt_before_export", "leak"),
        ("decrypt_after_reading: true\n", "decrypt_after_reading", "decrypt the input files"),
        ("export_in_parallel: 'yes'\n", "export_in_parallel", "must be true or false"),
    ],
)
def test_export_keys_refused_with_reason(tmp_path: Path, extra: str, key: str, needle: str) -> None:
    with pytest.raises(RecipeError) as info:
        load_recipe(_recipe(tmp_path, extra))
    msg = str(info.value)
    assert f": {key}: " in msg and needle in msg


def test_keep_hashes_refused_with_a_deduplicator(tmp_path: Path) -> None:
    with pytest.raises(RecipeError) as info:
        load_recipe(
            _recipe(
                tmp_path,
                "keep_hashes_in_res_ds: true\n",
                "  - document_simhash_deduplicator: {ignore_pattern: '\\p{P}'}\n",
            )
        )
    assert "keep_hashes_in_res_ds" in str(info.value) and "document_simhash_deduplicator" in str(info.value)


def test_export_keys_accepted_as_in_data_juicer(tmp_path: Path) -> None:
    r = load_recipe(
        _recipe(
            tmp_path,
            "export_type: JSON\nexport_shard_size: 0\nexport_in_parallel: false\n"
            "keep_hashes_in_res_ds: true\nencrypt_before_export: false\n",
            export="out.json",
        )
    )
    assert (r.keep_hashes_in_res_ds, r.export_in_parallel) == (True, False)
    assert not {"export_type", "export_shard_size", "export_in_parallel", "keep_hashes_in_res_ds"} & set(r.ignored_keys)
    default = load_recipe(_recipe(tmp_path, ""))
    assert (default.keep_hashes_in_res_ds, default.export_in_parallel) == (False, True)
    # Defaults stay out of the effective config, so jobs started before these keys resume unchanged.
    assert "keep_hashes_in_res_ds" not in default.to_dict() and "export_in_parallel" not in default.to_dict()
    from airflow_provider_dj.engine.config.schema import recipe_from_dict

    assert recipe_from_dict(r.to_dict()) == r
