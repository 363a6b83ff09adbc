"""Relative media paths come back absolute when a partition is read, as Data-Juicer loads them
(engine/input/media_paths.py), without changing any planned hash.

Real image files shipped by installed packages (tests/unit/engine/media_corpus.py); in-process, no
Airflow, no Ray."""

from __future__ import annotations

import os

import pyarrow as pa
import pytest

from airflow_provider_dj.engine.config.schema import PartitionConfig
from airflow_provider_dj.engine.input import media_paths
from airflow_provider_dj.engine.input.media import MediaKeys
from airflow_provider_dj.engine.input.partitioning import hash_recorded_partition, plan_partitions, read_partition
from tests.unit.engine.media_corpus import copy_images, image_text_rows, write_rows

MANUAL2 = PartitionConfig(mode="manual", num_of_partitions=2)


@pytest.fixture
def corpus(tmp_path):
    images = copy_images(tmp_path / "media", 3)
    rows = image_text_rows(6, [f"../media/{p.name}" for p in images])
    rows[1]["images"] = []
    rows[2]["images"] = None
    rows[3]["images"] = [str(images[0]), f"sub/../../media/{images[1].name}"]
    rows[4]["images"] = [f"../media/{images[2].name}", f"../media/{images[2].name}"]
    data = write_rows(tmp_path / "data" / "d.jsonl", rows)
    return {"data": data, "images": [str(p) for p in images], "rows": rows}


def test_relative_paths_are_read_as_the_files_planning_resolved(corpus):
    info = plan_partitions(corpus["data"], MANUAL2)
    assert info["media_paths"] == media_paths.RESOLVED
    got = [v for pid in range(2) for v in read_partition(info, pid).column("images").to_pylist()]
    a, b, c = corpus["images"]
    assert got == [[a], [], None, [a, b], [c, c], [c]]
    digested = {p for part in info["partitions"] for p in part["media"]["file_digests"]}
    assert {p for v in got for p in v or []} == digested  # the files the job's identity covers


def test_planned_hashes_are_of_the_rows_as_stored(corpus):
    info = plan_partitions(corpus["data"], MANUAL2)
    for part in info["partitions"]:
        rows_only, _ = hash_recorded_partition(info["algorithm"], info["input_files"], part["segments"])
        assert part["rows_hash"] == rows_only
    # Reading verifies that hash, so it passes although the rows come back changed.
    assert read_partition(info, 0).num_rows == 3


def test_a_job_planned_without_the_rewrite_reads_its_rows_as_written(corpus):
    info = plan_partitions(corpus["data"], MANUAL2)
    del info["media_paths"]
    got = [v for pid in range(2) for v in read_partition(info, pid).column("images").to_pylist()]
    assert got == [r["images"] for r in corpus["rows"]]


def test_a_relative_dataset_path_still_gives_absolute_media_paths(corpus, monkeypatch):
    monkeypatch.chdir(os.path.dirname(os.path.dirname(corpus["data"])))
    info = plan_partitions(os.path.join("data", "d.jsonl"), MANUAL2)
    first = read_partition(info, 0).column("images").to_pylist()[0]
    assert first == [corpus["images"][0]] and os.path.isabs(first[0])


def test_parquet_rows_are_rewritten_too(corpus, tmp_path):
    path = tmp_path / "data" / "d.parquet"
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(corpus["rows"]), path)
    info = plan_partitions(str(path), MANUAL2)
    assert read_partition(info, 1).column("images").to_pylist()[1] == [corpus["images"][2]] * 2


def test_columns_that_hold_no_path_lists_are_left_alone():
    keys = MediaKeys()
    table = pa.table({"images": pa.array([None, None], pa.null()), "audios": [["a.wav"], ["/x/b.wav"]]})
    out = media_paths.resolve_media_columns(table, "/data/set/d.jsonl", keys)
    assert out.column("images").to_pylist() == [None, None]
    assert out.column("audios").to_pylist() == [["/data/set/a.wav"], ["/x/b.wav"]]
    url = media_paths.resolve_media_columns(pa.table({"videos": [["v.mp4"]]}), "s3://bucket/set/d.jsonl", keys)
    assert url.column("videos").to_pylist() == [["s3://bucket/set/v.mp4"]]
