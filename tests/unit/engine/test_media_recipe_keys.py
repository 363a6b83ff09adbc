"""Data-Juicer's image_key / audio_key / video_key: read from the recipe (no longer ignored), carried in the
effective config only when not the defaults, and a result key for strict resume (the partition hashes
cover the files those fields name, engine/input/media.py)."""

from __future__ import annotations

import pytest

from airflow_provider_dj.engine.config.recipe import RecipeError, load_recipe, parse_recipe
from airflow_provider_dj.engine.config.schema import recipe_from_dict
from airflow_provider_dj.engine.input.media import MediaKeys
from airflow_provider_dj.engine.job.resume import ResumeRefusedError
from airflow_provider_dj.engine.job.setup import prepare_job
from airflow_provider_dj.engine.jobdir import lock as job_lock
from tests.unit.engine.media_corpus import copy_images, image_text_rows, write_rows

BASE = {"dataset_path": "/in/d.jsonl", "export_path": "/out/r.jsonl", "process": ["whitespace_normalization_mapper"]}


def test_defaults_are_data_juicers_and_stay_out_of_the_effective_config():
    recipe = parse_recipe(dict(BASE), source_file=None, base_dir="/")
    assert recipe.media_keys == {"image": "images", "audio": "audios", "video": "videos"}
    assert MediaKeys.of_recipe(recipe) == MediaKeys()
    assert not {"image_key", "audio_key", "video_key"} & set(recipe.to_dict())
    assert "image_key" not in recipe.ignored_keys


def test_recipe_keys_are_read_and_survive_the_json_round_trip():
    recipe = parse_recipe(
        {**BASE, "image_key": "pics", "video_key": "clips", "text_keys": ["caption"]}, source_file=None, base_dir="/"
    )
    assert MediaKeys.of_recipe(recipe) == MediaKeys(image="pics", audio="audios", video="clips", text="caption")
    cfg = recipe.to_dict()
    assert cfg["image_key"] == "pics" and cfg["video_key"] == "clips" and "audio_key" not in cfg
    assert recipe_from_dict(cfg) == recipe


@pytest.mark.parametrize("value", ["", 3])
def test_a_key_that_names_no_field_is_refused(value):
    with pytest.raises(RecipeError, match="image_key"):
        parse_recipe({**BASE, "image_key": value}, source_file=None, base_dir="/")


def test_changing_the_image_key_refuses_a_resume(tmp_path):
    images = copy_images(tmp_path / "media", 2)
    data = write_rows(tmp_path / "d.jsonl", image_text_rows(6, [f"media/{p.name}" for p in images]))
    recipe = tmp_path / "r.yaml"
    body = (
        f"dataset_path: {data}\nexport_path: {tmp_path / 'o.jsonl'}\n"
        "partition: {mode: manual, num_of_partitions: 2}\nprocess: [whitespace_normalization_mapper]\n"
    )
    recipe.write_text(body)
    job = prepare_job(load_recipe(recipe), job_id="j", airflow_run_id="r1")
    job_lock.release(job.job_dir, "r1")
    recipe.write_text(body + "image_key: pictures\n")
    with pytest.raises(ResumeRefusedError) as ei:
        prepare_job(load_recipe(recipe, {"resume": "j"}), job_id="j", airflow_run_id="r2")
    assert ei.value.reason == "config_changed" and "image_key" in str(ei.value)


def test_a_new_job_hashes_the_files_the_recipes_key_names(tmp_path):
    import json
    import os

    images = copy_images(tmp_path / "media", 2)
    rows = [{"caption": f"c{i}", "pics": [f"media/{images[i % 2].name}"]} for i in range(8)]
    data = write_rows(tmp_path / "d.jsonl", rows)
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        f"dataset_path: {data}\nexport_path: {tmp_path / 'o.jsonl'}\nimage_key: pics\ntext_keys: caption\n"
        "process: [whitespace_normalization_mapper]\n"
    )
    job = prepare_job(load_recipe(recipe), job_id="k")
    info = json.load(open(os.path.join(job.job_dir, "checkpoints", "partitioning_info.json")))
    assert info["media_keys"] == {"image": "pics", "audio": "audios", "video": "videos", "text": "caption"}
    assert info["modality"]["modality"] == "multimodal" and info["media"]["files"] == 2
