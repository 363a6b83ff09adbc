"""A partition no worker could hold is refused when the job is planned, naming what to change."""

from __future__ import annotations

import os

import pytest

from airflow_provider_dj import settings
from airflow_provider_dj.engine.input.partition_memory import (
    GIB,
    WORKING_MEMORY_FACTOR,
    PartitionTooLargeError,
    check_partitions_fit,
    memory_limit_bytes,
)
from tests.unit.engine.recipe_helpers import small_recipe


def _info(*sizes_gib: float) -> dict:
    parts, row = [], 0
    for pid, size in enumerate(sizes_gib):
        parts.append({"partition_id": pid, "start_row": row, "end_row": row + 1000, "nbytes": int(size * GIB)})
        row += 1000
    return {"partitions": parts}


def test_partitions_that_fit_pass():
    check_partitions_fit(_info(1.0, 2.0), limit_bytes=int(2.0 * WORKING_MEMORY_FACTOR * GIB))
    check_partitions_fit({"partitions": []}, limit_bytes=1)


def test_the_largest_partition_is_named_with_the_estimate_and_the_keys_to_change():
    with pytest.raises(PartitionTooLargeError) as caught:
        check_partitions_fit(_info(1.0, 8.0, 2.0), limit_bytes=16 * GIB)
    text = str(caught.value)
    assert text.startswith("partition 1 (rows 1000-1999) holds 8.00 GiB of input;")
    assert "(28.0 GiB), more than the 16.0 GiB a worker has" in text
    # 11 GiB of input at most 16/3.5 GiB per partition: at least 3 partitions, and more than today's 3.
    assert "partition.num_of_partitions: 4 or more" in text
    assert "partition.target_size_mb of at most 4681" in text and "nothing was written" in text


def test_the_limit_comes_from_the_setting_else_the_machine(monkeypatch):
    machine = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert memory_limit_bytes() == machine
    monkeypatch.setenv("DJ_PARTITION_MEMORY_LIMIT_GB", "1.5")
    settings.reset()
    assert memory_limit_bytes() == int(1.5 * GIB)
    with pytest.raises(PartitionTooLargeError, match=r"\[dj\] partition_memory_limit_gb\)"):
        check_partitions_fit(_info(1.0))


def test_a_run_is_refused_before_its_job_directory_exists(tmp_path, monkeypatch):
    from airflow_provider_dj.engine import run_job

    recipe = small_recipe(tmp_path, "too_big", "  - clean_email_mapper:\n")
    monkeypatch.setenv("DJ_PARTITION_MEMORY_LIMIT_GB", str(1000 / GIB))  # 1,000 bytes a worker
    settings.reset()
    with pytest.raises(PartitionTooLargeError, match=r"^partition [01] \(rows (0-99|100-199)\) holds"):
        run_job(recipe, job_id="big", workers=1)
    assert not (tmp_path / "work" / "big").exists()
    assert not (tmp_path / "out.jsonl").exists()


class _Op:
    def __init__(self, name: str, is_global: bool) -> None:
        self.name, self.is_global = name, is_global


class _Plan:
    def __init__(self, *ops) -> None:
        self.ops = list(ops)


def test_a_global_step_over_the_machine_is_refused_naming_the_rows_that_fit():
    from airflow_provider_dj.engine.planning.global_memory import (
        KEY_BYTES_PER_ROW,
        GlobalStepTooLargeError,
        check_global_steps_fit,
    )

    plan = _Plan(_Op("clean_email_mapper", False), _Op("document_deduplicator", True))
    limit = 24 * 10**9
    check_global_steps_fit(plan, limit // KEY_BYTES_PER_ROW, limit_bytes=limit)  # exactly fits
    check_global_steps_fit(_Plan(_Op("clean_email_mapper", False)), 10**12, limit_bytes=limit)  # no global op
    with pytest.raises(GlobalStepTooLargeError) as caught:
        check_global_steps_fit(plan, 1_000_000_000, limit_bytes=limit)
    text = str(caught.value)
    assert text.startswith("global op 1 (document_deduplicator) decides over every row at once: 1,000,000,000 rows")
    assert f"about 78.0 GB for its step ({KEY_BYTES_PER_ROW} bytes a row), more than 24.0 GB" in text
    assert f"jobs of at most {limit // KEY_BYTES_PER_ROW:,} rows" in text and "dedup_history" in text


def test_a_run_whose_global_step_cannot_fit_is_refused_before_work(tmp_path, monkeypatch):
    from airflow_provider_dj.engine import run_job
    from airflow_provider_dj.engine.planning.global_memory import GlobalStepTooLargeError

    recipe = small_recipe(
        tmp_path, "too_many_rows", "  - clean_email_mapper:\n  - document_deduplicator:\n", partitions=None
    )
    # an op that decides in its own code (the Data-Juicer adapter's, which needs Data-Juicer installed, so
    # stood in for here) cannot be sharded; tests/unit/engine/test_global_shards.py shows a shardable op's
    # job planned in shards
    from airflow_provider_dj.engine.planning import global_memory

    monkeypatch.setattr(global_memory, "is_shardable", lambda op_impl: False)
    monkeypatch.setenv("DJ_GLOBAL_STEP_MEMORY_LIMIT_GB", str(100 * 78 / 1e9))  # room for 100 rows' keys
    settings.reset()
    with pytest.raises(
        GlobalStepTooLargeError, match=r"200 rows need about .*decides in its own code.* jobs of at most 100 rows"
    ):
        run_job(recipe, job_id="many", workers=1)
    assert not (tmp_path / "work" / "many").exists()
