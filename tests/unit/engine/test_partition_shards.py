"""``export_layout: partition_shards``: one JSONL shard per partition, committed as a set with a manifest,
and a nightly job that hard-links the shards of the partitions it reused instead of writing them again.

Real engine, real files: jobs run in-process (``run_prepared_job``), no Airflow, no Ray.  Night 1 over
three files, night 2 over the same files plus a new one (exact and near duplicates of night-1 rows
among its rows), each with ``partition.align: file`` and ``reuse_across_jobs``; a from-scratch
single-file run of night 2's input is what night 2's shards must concatenate to, byte for byte.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
import xxhash

from airflow_provider_dj.engine.config.recipe import RecipeError, load_recipe
from airflow_provider_dj.engine.input import index_cache
from airflow_provider_dj.engine.job.completed_export import verify_completed_export
from airflow_provider_dj.engine.job.setup import prepare_job
from airflow_provider_dj.engine.jobdir.faults import FAULT_FILE, InjectedFault
from airflow_provider_dj.engine.runner.local import run_prepared_job
from airflow_provider_dj.testing.sample_corpus import write_corpus, write_growth_file
from tests.helpers_compare import assert_same_bytes

PROCESS = """process:
  - whitespace_normalization_mapper:
  - words_num_filter: {min_num: 5, max_num: 2000}
  - document_deduplicator: {lowercase: true}
  - text_length_filter: {min_len: 50}
"""
OLD_FILES, ROWS, SIZE = 3, 200, 100  # 6 partitions on night 1, 7 on night 2


def _recipe(tmp: Path, data: Path, name: str, work: Path, export: Path, *, layout: str | None, reuse=True) -> Path:
    recipe = tmp / f"{name}.yaml"
    recipe.write_text(
        f"dataset_path: {data}\nexport_path: {export}\nwork_dir: {work}\n"
        + (f"export_layout: {layout}\n" if layout else "")
        + f"partition: {{mode: manual, size: {SIZE}, align: file}}\n"
        f"intermediate_storage: {{reuse_across_jobs: {str(reuse).lower()}}}\n{PROCESS}"
    )
    return recipe


def _run(recipe: Path, name: str, faults: list | None = None, **kw):
    job = prepare_job(load_recipe(str(recipe)), job_id=name, **kw)
    if faults:
        (Path(job.job_dir) / FAULT_FILE).write_text(json.dumps(faults))
    return job.job_dir, run_prepared_job(job).summary


def _manifest(export: Path) -> dict:
    return json.loads((export.parent / f"{export.name.split('.')[0]}.manifest.json").read_text())


def _joined(export: Path) -> bytes:
    """The set's shards in the manifest's order, each checked against its entry."""
    whole = b""
    for shard in _manifest(export)["shards"]:
        data = (export.parent / shard["file"]).read_bytes()
        assert (len(data), xxhash.xxh3_128_hexdigest(data)) == (shard["bytes"], shard["xxh3_128"])
        assert data.count(b"\n") == shard["rows"] > 0
        whole += data
    return whole


def _inodes(export: Path) -> dict[int, os.stat_result]:
    """Each shard's stat, by partition."""
    return {s["partition_id"]: os.stat(export.parent / s["file"]) for s in _manifest(export)["shards"]}


def _grow(data: Path) -> None:
    texts = [json.loads(line)["text"] for i in range(OLD_FILES) for line in open(data / f"part_{i}.jsonl")]
    write_growth_file(str(data / f"part_{OLD_FILES}.jsonl"), texts, 60, seed=99)


@pytest.fixture
def corpus(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.setattr(index_cache, "RACY_MARGIN_NS", 0)
    data = tmp_path / "in"
    for i in range(OLD_FILES):
        write_corpus(str(data / f"part_{i}.jsonl"), ROWS, seed=i)
    return data


@pytest.fixture(scope="module")
def nights(tmp_path_factory):
    """Night 1 and night 2 to their own shard sets (a templated export path), and the single-file
    exports of both nights' input from scratch."""
    tmp = tmp_path_factory.mktemp("pshards")
    data = tmp / "in"
    for i in range(OLD_FILES):
        write_corpus(str(data / f"part_{i}.jsonl"), ROWS, seed=i)
    out = tmp / "out"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(index_cache, "RACY_MARGIN_NS", 0)
        _run(_recipe(tmp, data, "s1", tmp / "scratch1", out / "s1.jsonl", layout=None, reuse=False), "s1")
        _, n1 = _run(
            _recipe(tmp, data, "night1", tmp / "work", out / "night1.jsonl", layout="partition_shards"), "night1"
        )
        _grow(data)
        job2, n2 = _run(
            _recipe(tmp, data, "night2", tmp / "work", out / "night2.jsonl", layout="partition_shards"), "night2"
        )
        _run(_recipe(tmp, data, "s2", tmp / "scratch2", out / "s2.jsonl", layout=None, reuse=False), "s2")
    return {"tmp": tmp, "data": data, "out": out, "n1": n1, "n2": n2, "job2": job2}


def test_the_shards_joined_are_the_single_file_export(nights) -> None:
    out = nights["out"]
    assert_same_bytes(_joined(out / "night1.jsonl"), (out / "s1.jsonl").read_bytes())
    assert_same_bytes(_joined(out / "night2.jsonl"), (out / "s2.jsonl").read_bytes())
    manifest = _manifest(out / "night2.jsonl")
    assert manifest["layout"] == "partition_shards" and manifest["job_id"] == "night2"
    assert manifest["checksum_xxh3_128"] == xxhash.xxh3_128_hexdigest((out / "s2.jsonl").read_bytes())
    assert [s["partition_id"] for s in manifest["shards"]] == list(range(7))  # one per partition, in order
    assert [s["file"] for s in manifest["shards"]] == [f"night2-{i:02d}-of-07.jsonl" for i in range(7)]
    assert not (out / "night2.jsonl").exists()  # the set replaces the one file
    exp = nights["n2"]["export"]
    assert exp["path"] == str(out / "night2.manifest.json") and exp["export_layout"] == "partition_shards"
    assert verify_completed_export(nights["job2"])["export"]["rows"] == manifest["total_rows"]


def test_night_2_links_the_unchanged_shards_and_writes_only_the_new_one(nights) -> None:
    out = nights["out"]
    old, new = _inodes(out / "night1.jsonl"), _inodes(out / "night2.jsonl")
    assert sorted(old) == list(range(6)) and sorted(new) == list(range(7))
    for pid in range(6):  # the same file under both nights' names
        assert (new[pid].st_dev, new[pid].st_ino) == (old[pid].st_dev, old[pid].st_ino)
        assert new[pid].st_nlink == 2
    assert new[6].st_nlink == 1 and new[6].st_ino not in {s.st_ino for s in old.values()}
    for s in new.values():  # read-only: an edit through one name would change both nights
        assert stat.S_IMODE(s.st_mode) & 0o222 == 0
    reuse = nights["n2"]["reuse"]
    assert reuse["export_shards_linked"] == 6 and reuse["export_parts_reused"] == 6
    assert reuse["export_bytes_reused"] == sum(s["bytes"] for s in _manifest(out / "night1.jsonl")["shards"])


def test_a_changed_shard_is_written_again_not_linked(nights) -> None:
    """A night-1 shard edited after its export (read-only does not stop root) is not trusted."""
    tmp, out, data = nights["tmp"], nights["out"], nights["data"]
    shard = out / _manifest(out / "night1.jsonl")["shards"][2]["file"]
    shard.chmod(0o644)
    shard.write_bytes(shard.read_bytes().replace(b"a", b"b", 1))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(index_cache, "RACY_MARGIN_NS", 0)
        _, n3 = _run(_recipe(tmp, data, "night3", tmp / "work3", out / "night3.jsonl", layout="partition_shards"), "n3")
    assert_same_bytes(_joined(out / "night3.jsonl"), (out / "s2.jsonl").read_bytes())
    assert n3["reuse"]["export_shards_linked"] == 0  # its own work dir: nothing to reuse, nothing linked


def test_the_same_export_path_every_night(tmp_path: Path, corpus: Path) -> None:
    """Night 2 over night 1's set: the linked shards take new names, the old names are retired, and a
    crash between the shards and the manifest leaves no manifest; the resume completes the set."""
    export = tmp_path / "out" / "corpus.jsonl"
    _run(_recipe(tmp_path, corpus, "night1", tmp_path / "work", export, layout="partition_shards"), "night1")
    before = _inodes(export)
    _grow(corpus)
    recipe = _recipe(tmp_path, corpus, "night2", tmp_path / "work", export, layout="partition_shards")
    with pytest.raises(InjectedFault):
        _run(recipe, "night2", [{"point": "export_commit", "times": 1, "kind": "raise"}])
    assert not (tmp_path / "out" / "corpus.manifest.json").exists()  # no reader trusts a half set
    from airflow_provider_dj.engine import run_job

    run_job(str(recipe), job_id="night2", resume="night2", workers=1)
    _run(_recipe(tmp_path, corpus, "s2", tmp_path / "scratch", tmp_path / "s2.jsonl", layout=None, reuse=False), "s2")
    assert_same_bytes(_joined(export), (tmp_path / "s2.jsonl").read_bytes())
    after = _inodes(export)
    assert all(after[pid].st_ino == before[pid].st_ino for pid in range(6))
    names = sorted(s["file"] for s in _manifest(export)["shards"])
    assert sorted(os.listdir(export.parent)) == sorted([*names, "corpus.manifest.json"])  # -of-06 names retired


def test_a_fault_mid_export_leaves_the_previous_set(tmp_path: Path, corpus: Path) -> None:
    export = tmp_path / "out" / "corpus.jsonl"
    _run(_recipe(tmp_path, corpus, "night1", tmp_path / "work", export, layout="partition_shards"), "night1")
    files = {n: (export.parent / n).read_bytes() for n in os.listdir(export.parent)}
    _grow(corpus)
    recipe = _recipe(tmp_path, corpus, "night2", tmp_path / "work", export, layout="partition_shards")
    with pytest.raises(InjectedFault):
        _run(recipe, "night2", [{"point": "export_mid", "times": 1, "kind": "raise"}])
    assert {n: (export.parent / n).read_bytes() for n in os.listdir(export.parent)} == files  # nothing staged left
    assert _manifest(export)["job_id"] == "night1"


def test_a_single_file_night_copies_the_shards_bytes(tmp_path: Path, corpus: Path) -> None:
    """The default layout after a partition-shards night reuses the shards' bytes (copied, not linked)."""
    _run(
        _recipe(tmp_path, corpus, "n1", tmp_path / "work", tmp_path / "o" / "n1.jsonl", layout="partition_shards"), "n1"
    )
    _grow(corpus)
    _, s2 = _run(_recipe(tmp_path, corpus, "n2", tmp_path / "work", tmp_path / "o" / "n2.jsonl", layout=None), "n2")
    _run(_recipe(tmp_path, corpus, "s2", tmp_path / "scratch", tmp_path / "s2.jsonl", layout=None, reuse=False), "s2")
    assert_same_bytes((tmp_path / "o" / "n2.jsonl").read_bytes(), (tmp_path / "s2.jsonl").read_bytes())
    assert s2["reuse"]["export_parts_reused"] == 6 and "export_shards_linked" not in s2["reuse"]


@pytest.mark.parametrize(
    "extra, export, needle",
    [
        ("export_layout: shards\n", "out.jsonl", "must be one of file, partition_shards"),
        ("export_layout: true\n", "out.jsonl", "must be one of file, partition_shards"),
        ("export_layout: partition_shards\nexport_shard_size: 4096\n", "out.jsonl", "set one of them, not both"),
        ("export_layout: partition_shards\n", "out.parquet", "is a Parquet file"),
    ],
)
def test_bad_values_are_refused_before_work(tmp_path: Path, extra: str, export: str, needle: str) -> None:
    (tmp_path / "in.jsonl").write_text('{"text": "abcdef"}\n')
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        f"dataset_path: {tmp_path}/in.jsonl\nexport_path: {tmp_path}/{export}\nwork_dir: {tmp_path}/work\n"
        f"{extra}process:\n  - whitespace_normalization_mapper:\n"
    )
    with pytest.raises(RecipeError) as info:
        load_recipe(str(recipe))
    msg = str(info.value)
    assert "r.yaml" in msg and ": export_layout: " in msg and needle in msg
    assert not (tmp_path / "work").exists()


def test_the_key_is_a_result_key_and_absent_by_default(tmp_path: Path) -> None:
    (tmp_path / "in.jsonl").write_text('{"text": "abcdef"}\n')
    recipe = tmp_path / "r.yaml"
    body = f"dataset_path: {tmp_path}/in.jsonl\nexport_path: {tmp_path}/o.jsonl\nprocess:\n  - lowercase_mapper:\n"
    recipe.write_text(body)
    default = load_recipe(str(recipe))
    assert default.export_layout == "file" and "export_layout" not in default.to_dict()
    recipe.write_text("export_layout: partition_shards\n" + body)
    loaded = load_recipe(str(recipe))
    assert loaded.to_dict()["export_layout"] == "partition_shards"
    from airflow_provider_dj.engine.config.schema import recipe_from_dict

    assert recipe_from_dict(loaded.to_dict()).export_layout == "partition_shards"
