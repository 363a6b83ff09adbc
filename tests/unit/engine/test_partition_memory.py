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
    from airflow_provider_dj.testing.sample_corpus import write_corpus

    corpus = write_corpus(str(tmp_path / "corpus.jsonl"), 200, seed=3)
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        f"project_name: too_big\ndataset_path: {corpus}\nexport_path: {tmp_path / 'out.jsonl'}\n"
        f"work_dir: {tmp_path / 'work'}\npartition:\n  mode: manual\n  num_of_partitions: 2\n"
        "process:\n  - clean_email_mapper:\n"
    )
    monkeypatch.setenv("DJ_PARTITION_MEMORY_LIMIT_GB", str(1000 / GIB))  # 1,000 bytes a worker
    settings.reset()
    with pytest.raises(PartitionTooLargeError, match=r"^partition [01] \(rows (0-99|100-199)\) holds"):
        run_job(str(recipe), job_id="big", workers=1)
    assert not (tmp_path / "work" / "big").exists()
    assert not (tmp_path / "out.jsonl").exists()
