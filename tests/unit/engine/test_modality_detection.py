"""Auto partitioning detects the modality from a sample of rows (Data-Juicer 1.6.1's rules) and sizes
partitions by the bytes of the media the rows name; a text corpus plans exactly as before.

Real image files (shipped by installed packages, tests/unit/engine/media_corpus.py), real planning."""

from __future__ import annotations

import json
import math

import pytest

from airflow_provider_dj.cli.main import main
from airflow_provider_dj.engine.config.schema import PartitionConfig
from airflow_provider_dj.engine.input import modality
from airflow_provider_dj.engine.input.media import MediaKeys
from airflow_provider_dj.engine.input.partitioning import (
    _auto_rows,
    hash_recorded_partition,
    plan_partitions,
)
from airflow_provider_dj.testing.sample_corpus import write_corpus
from tests.unit.engine.media_corpus import copy_images, image_text_rows, write_rows

MiB = 1024 * 1024


def expected_rows(sizes_per_row: list[int], kind: str, target_mb: int = 256) -> int:
    p90 = sorted(sizes_per_row)[int(len(sizes_per_row) * 0.9)]
    table = modality.MODALITY_SIZES[kind]
    return max(modality.MEDIA_MIN_ROWS, min(int(target_mb * MiB // (p90 * table.memory_multiplier)), table.max_rows))


def test_the_table_is_data_juicers():
    assert {k: (v.default_rows, v.max_rows, v.memory_multiplier) for k, v in modality.MODALITY_SIZES.items()} == {
        "text": (10_000, 50_000, 1.0),
        "image": (2_000, 10_000, 5.0),
        "audio": (1_000, 4_000, 8.0),
        "video": (400, 2_000, 20.0),
        "multimodal": (1_600, 6_000, 10.0),
    }


@pytest.mark.parametrize(
    "total,sample", [(0, 0), (999, 999), (1000, 10), (50_000, 500), (99_999, 999), (100_000, 100), (5_000_000, 5000)]
)
def test_sample_size_follows_data_juicer(total, sample):
    assert modality.sample_size(total) == sample
    assert modality.sample_size(10**9) == 10_000


@pytest.mark.parametrize(
    "row,kind",
    [
        ({"text": "a caption", "images": ["x.jpg"]}, "multimodal"),  # an image with a caption is multimodal
        ({"text": "", "images": ["x.jpg"]}, "image"),
        ({"images": ["x.jpg"]}, "image"),
        ({"audios": ["x.wav"]}, "audio"),
        ({"videos": ["x.mp4"]}, "video"),
        ({"images": ["x.jpg"], "videos": ["y.mp4"]}, "multimodal"),
        ({"text": "words", "images": []}, "text"),
        ({"id": 1}, "text"),  # nothing at all: Data-Juicer's default
    ],
)
def test_row_modality(row, kind):
    assert modality.row_modality(row, MediaKeys()) == kind


def test_a_text_corpus_plans_exactly_as_before(tmp_path):
    data = write_corpus(str(tmp_path / "t.jsonl"), 3000, seed=4)
    cfg = PartitionConfig(target_size_mb=1)
    info = plan_partitions(data, cfg)
    rows, _how = _auto_rows(cfg, info["total_rows"], info["total_bytes"])
    assert info["num_partitions"] == math.ceil(3000 / rows) > 1
    assert info["modality"]["modality"] == "text" and info["modality"]["sample_rows"] == 30
    assert "text detected in a sample of 30 rows" in info["how_chosen"] and "media" not in info
    for p in info["partitions"]:  # the row bytes' hash, no media record
        assert "media" not in p and "rows_hash" not in p
        assert p["content_hash"] == hash_recorded_partition(info["algorithm"], info["input_files"], p["segments"])[0]


def test_image_text_rows_are_multimodal_sized_by_their_files(tmp_path):
    images = copy_images(tmp_path / "media", 4)
    rows = image_text_rows(300, [str(p) for p in images])
    data = write_rows(tmp_path / "d.jsonl", rows)
    info = plan_partitions(data, PartitionConfig(target_size_mb=16))
    per_row = [images[i % 4].stat().st_size for i in range(300)]
    want = expected_rows(per_row, "multimodal", 16)
    assert info["modality"] == {
        "modality": "multimodal",
        "sample_rows": 300,
        "rows_by_modality": {"multimodal": 300},
        "keys": {"image": "images", "audio": "audios", "video": "videos", "text": "text"},
        "media_bytes_per_row_p90": sorted(per_row)[270],
        "rows_per_partition": want,
    }
    assert info["num_partitions"] == math.ceil(300 / want)
    assert "auto: multimodal detected in a sample of 300 rows (multimodal 300; text key text" in info["how_chosen"]
    assert f"x 10 memory multiplier, target 16 MB, 10-6000 rows: {want} rows/partition" in info["how_chosen"]


def test_images_without_text_are_image_and_the_row_json_does_not_count(tmp_path):
    images = copy_images(tmp_path / "media", 2)
    data = write_rows(tmp_path / "d.jsonl", image_text_rows(200, [str(p) for p in images], text=False))
    info = plan_partitions(data, PartitionConfig(target_size_mb=4))
    per_row = [images[i % 2].stat().st_size for i in range(200)]
    assert info["modality"]["modality"] == "image"
    assert info["modality"]["rows_per_partition"] == expected_rows(per_row, "image", 4)
    # sized by the files: the rows' JSON is some thousands of bytes, which alone would make one partition
    assert info["total_bytes"] < 4 * MiB and info["num_partitions"] > 1


def test_the_most_common_row_modality_wins_and_max_size_caps_the_target(tmp_path):
    clips = tmp_path / "clips"
    clips.mkdir()
    (clips / "a.mp4").write_bytes(b"\x00" * 300_000)
    rows = [{"videos": ["clips/a.mp4"]}] * 60 + [{"text": "just words"}] * 40
    data = write_rows(tmp_path / "d.jsonl", rows)
    info = plan_partitions(data, PartitionConfig(target_size_mb=512, max_size_mb=512))
    assert info["modality"]["rows_by_modality"] == {"text": 40, "video": 60}
    assert info["modality"]["modality"] == "video"
    # p90 of (300,000 x 60, 0 x 40) is 300,000 bytes; x 20 = 6 MB a row; 512 MB -> 89 rows
    assert info["modality"]["rows_per_partition"] == 512 * MiB // (300_000 * 20) == 89
    assert info["num_partitions"] == 2


def test_recipe_keys_name_the_fields(tmp_path):
    sounds = tmp_path / "sounds"
    sounds.mkdir()
    (sounds / "s.wav").write_bytes(b"RIFF" + b"\x01" * 50_000)
    data = write_rows(tmp_path / "d.jsonl", [{"speech": ["sounds/s.wav"], "body": ""}] * 30)
    keys = MediaKeys(audio="speech", text="body")
    info = plan_partitions(data, PartitionConfig(), media_keys=keys)
    assert info["modality"]["modality"] == "audio" and info["modality"]["keys"]["audio"] == "speech"
    assert info["media_keys"] == keys.to_dict()
    assert "audio_key=speech" in info["how_chosen"]
    # Data-Juicer's default key names nothing here: text, and no media hashed
    assert plan_partitions(data, PartitionConfig())["modality"]["modality"] == "text"


def test_manual_mode_detects_nothing_but_still_hashes_media(tmp_path):
    images = copy_images(tmp_path / "media", 2)
    data = write_rows(tmp_path / "d.jsonl", image_text_rows(20, [str(p) for p in images]))
    info = plan_partitions(data, PartitionConfig(mode="manual", num_of_partitions=2))
    assert "modality" not in info and info["num_partitions"] == 2
    assert all(p["media"]["files"] == 2 for p in info["partitions"])


def test_validate_says_the_modality_and_the_partition_size(tmp_path, capsys):
    images = copy_images(tmp_path / "media", 3)
    write_rows(tmp_path / "d.jsonl", image_text_rows(50, [f"media/{p.name}" for p in images]))
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        f"dataset_path: {tmp_path / 'd.jsonl'}\nexport_path: {tmp_path / 'o.jsonl'}\n"
        "partition: {target_size_mb: 8}\nprocess: [whitespace_normalization_mapper]\n"
    )
    assert main(["validate", "--check-input", str(recipe)]) == 0
    per_row = [images[i % 3].stat().st_size for i in range(50)]
    p90 = sorted(per_row)[45]
    line = [ln.strip() for ln in capsys.readouterr().out.splitlines() if ln.strip().startswith("modality:")]
    assert line == [
        "modality: multimodal (first 50 rows: multimodal 50; text key 'text', media keys 'images', 'audios', "
        f"'videos'); partitions: auto, {expected_rows(per_row, 'multimodal', 8)} rows each ({p90} bytes of "
        "media/row at p90 x 10, target 8 MB, at most 6000)"
    ]


def test_validate_refuses_a_sample_row_naming_a_missing_file(tmp_path, capsys):
    write_rows(tmp_path / "d.jsonl", [{"text": "t", "images": ["media/none.jpg"]}])
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        f"dataset_path: {tmp_path / 'd.jsonl'}\nexport_path: {tmp_path / 'o.jsonl'}\n"
        "process: [whitespace_normalization_mapper]\n"
    )
    assert main(["validate", "--check-input", str(recipe)]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'd.jsonl'}: line 1: images names 'media/none.jpg' (resolved to " in err
    assert "which does not exist" in err


def test_a_parquet_corpus_is_sampled_too(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    images = copy_images(tmp_path / "media", 2)
    rows = image_text_rows(40, [str(p) for p in images], text=False)
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "d.parquet")
    info = plan_partitions(str(tmp_path / "d.parquet"), PartitionConfig())
    assert info["modality"]["modality"] == "image"
    assert sum(p["media"]["files"] for p in info["partitions"]) == 2 * info["num_partitions"]
    assert json.dumps(info)  # the whole document is JSON


def test_file_alignment_divides_each_file_by_the_media_size(tmp_path):
    images = copy_images(tmp_path / "media", 2)
    for name, n in (("a.jsonl", 50), ("b.jsonl", 25)):
        write_rows(tmp_path / "in" / name, image_text_rows(n, [str(p) for p in images], text=False))
    info = plan_partitions(str(tmp_path / "in"), PartitionConfig(target_size_mb=1, extra={"align": "file"}))
    rows = info["modality"]["rows_per_partition"]
    per_row = [images[i % 2].stat().st_size for i in range(75)]
    assert rows == expected_rows(per_row[:75], "image", 1) and info["align"] == "file"
    assert info["num_partitions"] == math.ceil(50 / rows) + math.ceil(25 / rows)
    assert info["how_chosen"].endswith(f"{rows} rows/partition; aligned to input files")
    assert all(len(p["segments"]) == 1 for p in info["partitions"])
