"""Media files named by rows are part of the job's identity (engine/input/media.py): resolved as
Data-Juicer resolves them, refused before any work when missing, unreadable, not a path list or outside
``allowed_roots``, and hashed into the partition, so strict resume refuses a changed image naming it
and nightly reuse does not reuse its partition.

Real image files shipped by installed packages (tests/unit/engine/media_corpus.py); real engine,
in-process jobs, no Airflow, no Ray."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from airflow_provider_dj.engine.config.recipe import load_recipe
from airflow_provider_dj.engine.config.schema import PartitionConfig
from airflow_provider_dj.engine.input.media import resolve_media_path
from airflow_provider_dj.engine.input.partitioning import hash_recorded_partition, plan_partitions, read_partition
from airflow_provider_dj.engine.input.sources import InputError, InputOutsideRootsError
from airflow_provider_dj.engine.job.resume import ResumeRefusedError
from airflow_provider_dj.engine.job.setup import prepare_job
from airflow_provider_dj.engine.jobdir import lock as job_lock
from airflow_provider_dj.engine.runner.local import run_prepared_job
from tests.unit.engine.media_corpus import copy_images, image_text_rows, write_rows

MANUAL3 = PartitionConfig(mode="manual", num_of_partitions=3)


@pytest.fixture
def corpus(tmp_path):
    """30 image-caption rows in data/d.jsonl naming 3 real images by relative paths (../media/...),
    row i naming image i % 3, so each of the 3 manual partitions names all three."""
    images = copy_images(tmp_path / "media", 3)
    data = write_rows(tmp_path / "data" / "d.jsonl", image_text_rows(30, [f"../media/{p.name}" for p in images]))
    return {"data": data, "images": images, "tmp": tmp_path}


def test_relative_paths_resolve_against_the_dataset_files_folder(tmp_path):
    assert resolve_media_path("a/b.jpg", "/data/set/d.jsonl") == "/data/set/a/b.jpg"
    assert resolve_media_path("../m/b.jpg", "/data/set/d.jsonl") == "/data/m/b.jpg"
    assert resolve_media_path("/abs/b.jpg", "/data/set/d.jsonl") == "/abs/b.jpg"
    assert resolve_media_path("s3://bucket/b.jpg", "/data/set/d.jsonl") == "s3://bucket/b.jpg"
    assert resolve_media_path("b.jpg", "s3://bucket/set/d.jsonl") == "s3://bucket/set/b.jpg"


def test_each_partition_hashes_its_rows_and_the_bytes_of_its_files(corpus):
    info = plan_partitions(corpus["data"], MANUAL3)
    assert info["media"]["partitions"] == 3 and info["media"]["files"] == 9
    resolved = [str(p) for p in corpus["images"]]
    for p in info["partitions"]:
        rows_only, _ = hash_recorded_partition(info["algorithm"], info["input_files"], p["segments"])
        assert p["rows_hash"] == rows_only != p["content_hash"]
        assert sorted(p["media"]["file_digests"]) == resolved
        assert p["media"]["bytes"] == sum(os.path.getsize(x) for x in resolved)
    assert len(read_partition(info, 1)) == 10  # reading checks the rows' hash


def test_a_changed_image_changes_only_the_hashes_of_partitions_naming_it(corpus):
    rows = image_text_rows(30, [f"../media/{p.name}" for p in corpus["images"]])
    for i in range(10, 20):  # partition 1 names only image 0
        rows[i]["images"] = [f"../media/{corpus['images'][0].name}"]
    for i in list(range(10)) + list(range(20, 30)):  # the others never name image 0
        rows[i]["images"] = [f"../media/{corpus['images'][1 + i % 2].name}"]
    write_rows(corpus["tmp"] / "data" / "d.jsonl", rows)
    before = [p["content_hash"] for p in plan_partitions(corpus["data"], MANUAL3)["partitions"]]
    shutil.copyfile(corpus["images"][1], corpus["images"][0])  # another real image's bytes
    after = [p["content_hash"] for p in plan_partitions(corpus["data"], MANUAL3)["partitions"]]
    assert [b == a for b, a in zip(before, after)] == [True, False, True]


def test_a_missing_image_is_refused_naming_the_row_and_the_path(corpus):
    lines = open(corpus["data"]).read().splitlines(keepends=True)
    lines[16] = json.dumps({"text": "gone", "images": ["../media/nope.jpg"]}) + "\n"
    open(corpus["data"], "w").write("".join(lines))
    with pytest.raises(InputError) as ei:
        plan_partitions(corpus["data"], MANUAL3)
    assert str(ei.value) == (
        f"{corpus['data']}: line 17: images names '../media/nope.jpg' (resolved to "
        f"{corpus['tmp'] / 'media' / 'nope.jpg'}), which does not exist. Restore the file or fix the row (a "
        f"relative path is read from the dataset file's folder, as Data-Juicer reads it); nothing was written"
    )


def test_an_unreadable_image_is_refused(corpus):
    target = corpus["images"][2]
    os.remove(target)
    target.mkdir()  # there, but no file to read (a mode of 000 would not stop root)
    with pytest.raises(InputError) as ei:
        plan_partitions(corpus["data"], MANUAL3)
    assert str(ei.value).startswith(
        f"{corpus['data']}: line 3: images names '../media/{target.name}' (resolved to {target}), which cannot "
        "be read (Is a directory). Restore the file or fix the row"
    )


def test_a_value_that_is_not_a_list_of_paths_is_refused(corpus):
    lines = open(corpus["data"]).read().splitlines(keepends=True)
    lines[4] = json.dumps({"text": "one", "images": "../media/img_00.png"}) + "\n"
    open(corpus["data"], "w").write("".join(lines))
    with pytest.raises(InputError) as ei:
        plan_partitions(corpus["data"], MANUAL3)
    assert str(ei.value).startswith(
        f"{corpus['data']}: line 5: field 'images' must be a list of image file paths (as Data-Juicer reads "
        f'image_key), got "../media/img_00.png". Write it as ["path", ...] (or null for none)'
    )


def test_a_path_outside_allowed_roots_is_refused(corpus, tmp_path, monkeypatch):
    far = copy_images(tmp_path / "elsewhere", 1)[0]
    lines = open(corpus["data"]).read().splitlines(keepends=True)
    lines[7] = json.dumps({"text": "far", "images": [str(far)]}) + "\n"
    open(corpus["data"], "w").write("".join(lines))
    monkeypatch.delenv("AIRFLOW__DJ__ALLOWED_ROOTS", raising=False)
    monkeypatch.setenv("DJ_ALLOWED_ROOTS", f"{tmp_path / 'data'}, {tmp_path / 'media'}")
    with pytest.raises(InputOutsideRootsError) as ei:
        plan_partitions(corpus["data"], MANUAL3)
    assert f"{corpus['data']}: line 8: images path '{far}' resolves to" in str(ei.value)
    assert "under none of the roots this deployment lets a run use" in str(ei.value)
    lines[7] = json.dumps({"text": "near", "images": [f"../media/{corpus['images'][1].name}"]}) + "\n"
    open(corpus["data"], "w").write("".join(lines))
    assert plan_partitions(corpus["data"], MANUAL3)["num_partitions"] == 3  # inside a root: planned


def _recipe(tmp_path, data, name="r", extra=""):
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        f"dataset_path: {data}\nexport_path: {tmp_path / name}.jsonl\n"
        f"partition: {{mode: manual, num_of_partitions: 3}}\n{extra}"
        "process:\n  - whitespace_normalization_mapper:\n  - words_num_filter: {min_num: 2}\n"
    )
    return path


def test_a_missing_image_refuses_the_job_before_anything_is_written(corpus):
    os.remove(corpus["images"][1])
    work = corpus["tmp"] / "work"
    recipe = _recipe(corpus["tmp"], corpus["data"], extra=f"work_dir: {work}\n")
    with pytest.raises(InputError) as ei:
        prepare_job(load_recipe(recipe), job_id="j")
    assert str(ei.value).startswith(f"{corpus['data']}: line 2: images names '../media/{corpus['images'][1].name}'")
    assert not os.path.exists(work / "j")


def test_strict_resume_refuses_a_changed_image_naming_it(corpus):
    recipe = _recipe(corpus["tmp"], corpus["data"])
    job = prepare_job(load_recipe(recipe), job_id="j", airflow_run_id="r1")
    job_lock.release(job.job_dir, "r1")
    # Each file's digest is kept apart from partitioning_info.json, which every task reads.
    info = json.load(open(os.path.join(job.job_dir, "checkpoints", "partitioning_info.json")))
    assert all("file_digests" not in p["media"] and p["media"]["files"] == 3 for p in info["partitions"])
    digests = json.load(open(os.path.join(job.job_dir, "checkpoints", "media_digests", "partition_00000.json")))
    assert sorted(digests["file_digests"]) == sorted(str(p) for p in corpus["images"])
    resumed = prepare_job(load_recipe(recipe, {"resume": "j"}), job_id="j", airflow_run_id="r2")
    assert resumed.resumed  # unchanged images: the resume is accepted
    job_lock.release(job.job_dir, "r2")
    changed = corpus["images"][2]
    with open(changed, "ab") as fh:
        fh.write(b"\x00")  # one byte more: another file to an op, the same rows
    with pytest.raises(ResumeRefusedError) as ei:
        prepare_job(load_recipe(recipe, {"resume": "j"}), job_id="j", airflow_run_id="r3")
    assert ei.value.reason == "hash_mismatch"
    assert str(ei.value) == (
        f"partition 0 (rows 0-9) does not match its recorded content hash: media file {changed} changed since "
        f"the job was planned"
    )
    os.remove(changed)
    with pytest.raises(ResumeRefusedError) as ei:
        prepare_job(load_recipe(recipe, {"resume": "j"}), job_id="j", airflow_run_id="r4")
    assert ei.value.reason == "hash_mismatch" and "the input cannot be read as it was planned: " in str(ei.value)
    assert f"images names '../media/{changed.name}' (resolved to {changed}), which does not exist" in str(ei.value)


def test_nightly_reuse_recomputes_only_the_partition_whose_image_changed(tmp_path):
    images = copy_images(tmp_path / "media", 4)
    rows = image_text_rows(30, [f"../media/{p.name}" for p in images[:3]])
    for i in range(10, 20):
        rows[i]["images"] = [f"../media/{images[3].name}"]  # only partition 1 names image 3
    data = write_rows(tmp_path / "data" / "d.jsonl", rows)
    work = tmp_path / "work"
    extra = f"work_dir: {work}\nintermediate_storage: {{reuse_across_jobs: true}}\n"

    def night(name):
        job = prepare_job(load_recipe(_recipe(tmp_path, data, name, extra)), job_id=name)
        return job.job_dir, run_prepared_job(job).summary

    night1_dir, s1 = night("night1")
    assert s1["export"]["rows"] == 30
    shutil.copyfile(images[0], images[3])  # image 3 now holds image 0's bytes; the rows are unchanged
    night2_dir, s2 = night("night2")
    assert s2["reuse"]["partitions_reused"] == 2 and s2["reuse"]["computed_partitions"] == 1
    info1 = json.load(open(os.path.join(night1_dir, "checkpoints", "partitioning_info.json")))
    info2 = json.load(open(os.path.join(night2_dir, "checkpoints", "partitioning_info.json")))
    same = [a["content_hash"] == b["content_hash"] for a, b in zip(info1["partitions"], info2["partitions"])]
    assert same == [True, False, True]
    assert open(tmp_path / "night1.jsonl").read() == open(tmp_path / "night2.jsonl").read()  # same rows out


@pytest.mark.parametrize("key", ["pics.v2", "bilder_é", "a|b"])
def test_any_key_spelling_is_found_literally(tmp_path, key):
    from airflow_provider_dj.engine.input.media import KeySearch, MediaKeys, key_needles

    search = KeySearch(key_needles(MediaKeys(image=key)))
    assert search.found_in(json.dumps({key: ["x.jpg"]}, ensure_ascii=False).encode())
    assert not search.found_in(b'{"picsXv2": ["x.jpg"], "a": 1, "b": 2}')
    image = copy_images(tmp_path / "media", 1)[0]
    data = write_rows(tmp_path / "d.jsonl", [{"text": "t", key: [f"media/{image.name}"]}] * 4)
    info = plan_partitions(data, PartitionConfig(), media_keys=MediaKeys(image=key))
    assert info["modality"]["modality"] == "multimodal" and info["media"]["files"] == 1


def test_the_planners_roots_travel_with_the_hashing_task(corpus, monkeypatch):
    """A hashing task may run as a Ray task on a worker without the setting: the planner's roots go with it."""
    from airflow_provider_dj.engine.input.partitioning import hash_partition

    monkeypatch.delenv("AIRFLOW__DJ__ALLOWED_ROOTS", raising=False)
    monkeypatch.delenv("DJ_ALLOWED_ROOTS", raising=False)
    info = plan_partitions(corpus["data"], MANUAL3)
    p = info["partitions"][0]
    task_keys = {**info["media_keys"], "allowed_roots": str(corpus["tmp"] / "data")}  # media/ is outside
    with pytest.raises(InputOutsideRootsError, match=r"d\.jsonl: line 1: images path '\.\./media/"):
        hash_partition(info["algorithm"], info["input_files"], p["segments"], task_keys)
    assert (
        hash_partition(info["algorithm"], info["input_files"], p["segments"], info["media_keys"])[0]
        == (p["content_hash"])
    )
