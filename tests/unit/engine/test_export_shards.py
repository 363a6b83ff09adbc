"""``export_shard_size`` > 0: Data-Juicer's shard files, committed as a set (engine/output/shards.py).

The expected shards come from Data-Juicer 1.6.1 itself (tests/conformance/export_shards, made by
its default executor in its own venv with ``whitespace_normalization_mapper`` and three shard
sizes).  Here the engine runs the same recipe through ``run_job`` and its shards are compared with
Data-Juicer's: the same file names, the same rows in each file, and a shard count computed from
the same dataset size.  Data-Juicer serializes a row with ``json.dumps`` (``", "`` separators) and
this engine with its own JSONL writer, so the bytes of a row differ between the two; the bytes of
our shards are asserted against our single-file export instead (the shards, concatenated, are that
file byte for byte).  The commit is tested through its failures: a fault mid-shard, a disk full
mid-shard and a crash between the shards and the manifest each leave either the previous complete
set or no manifest, and the next run commits a complete set and retires the old one's files.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import xxhash

from airflow_provider_dj.engine.config.recipe import RecipeError, load_recipe
from airflow_provider_dj.engine.job.completed_export import verify_completed_export
from airflow_provider_dj.engine.job.setup import prepare_job
from airflow_provider_dj.engine.jobdir.events import read_events
from airflow_provider_dj.engine.jobdir.faults import FAULT_FILE, InjectedFault
from airflow_provider_dj.engine.output.arrow_size import table_nbytes
from airflow_provider_dj.engine.output.errors import ExportMismatchError
from airflow_provider_dj.engine.output.shards import manifest_path, shard_bounds, shard_count, shard_names
from airflow_provider_dj.engine.runner.local import run_prepared_job
from tests.helpers_compare import assert_same_bytes

FIX = Path(__file__).parents[2] / "conformance" / "export_shards"
SPEC = json.loads((FIX / "variants.json").read_text(encoding="utf-8"))
INPUT = FIX / "input.jsonl"


def _read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _recipe(tmp_path: Path, shard_size: int | None, *, parts: int = 3, export: str = "result.jsonl") -> Path:
    out_dir = tmp_path / "out"
    path = tmp_path / f"r_{shard_size}_{parts}_{export}.yaml"
    lines = [
        "project_name: shards",
        f"dataset_path: {INPUT}",
        f"export_path: {out_dir / export}",
        f"work_dir: {tmp_path / 'work'}",
        f"partition: {{mode: manual, num_of_partitions: {parts}}}",
        *([f"export_shard_size: {shard_size}"] if shard_size is not None else []),
        "process:",
        "  - whitespace_normalization_mapper:",
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _run(recipe: Path, job_id: str, **kw):
    from airflow_provider_dj.engine import run_job

    return run_job(str(recipe), job_id=job_id, workers=1, **kw)


def _files(out_dir: Path) -> list[str]:
    return sorted(os.listdir(out_dir))


def _check_manifest(out_dir: Path, job_id: str) -> dict:
    """The manifest's content against the files it names (rows, bytes, xxh3) and the totals."""
    manifest = json.loads((out_dir / "result.manifest.json").read_text())
    assert manifest["job_id"] == job_id and manifest["format"] == "dj-airflow-export-shards"
    whole = b""
    for shard in manifest["shards"]:
        data = (out_dir / shard["file"]).read_bytes()
        assert shard["bytes"] == len(data) and shard["xxh3_128"] == xxhash.xxh3_128_hexdigest(data)
        assert shard["rows"] == data.count(b"\n")
        whole += data
    assert manifest["total_rows"] == sum(s["rows"] for s in manifest["shards"])
    assert manifest["total_bytes"] == len(whole)
    assert manifest["checksum_xxh3_128"] == xxhash.xxh3_128_hexdigest(whole)
    return manifest


@pytest.fixture(scope="module")
def single_file(tmp_path_factory) -> bytes:
    """Our single-file export of the same recipe (no export_shard_size): what the shards must concatenate to."""
    tmp = tmp_path_factory.mktemp("single")
    result = _run(_recipe(tmp, None), "single")
    assert result.export_path == str(tmp / "out" / "result.jsonl") and _files(tmp / "out") == ["result.jsonl"]
    return (tmp / "out" / "result.jsonl").read_bytes()


@pytest.mark.parametrize("parts", [1, 3])
@pytest.mark.parametrize("variant", sorted(SPEC["variants"]))
def test_shards_are_the_files_data_juicer_writes(tmp_path: Path, variant: str, parts: int, single_file: bytes) -> None:
    spec = SPEC["variants"][variant]
    out_dir = tmp_path / "out"
    result = _run(_recipe(tmp_path, spec["export_shard_size"], parts=parts), "night1")

    assert _files(out_dir) == sorted([*spec["files"], "result.manifest.json"])
    for name, dj_rows in zip(spec["files"], spec["rows"]):
        dj = _read_jsonl(FIX / "expected" / variant / name)
        assert len(dj) == dj_rows
        assert _read_jsonl(out_dir / name) == dj, name
    manifest = _check_manifest(out_dir, "night1")
    assert [s["file"] for s in manifest["shards"]] == spec["files"]
    assert b"".join((out_dir / n).read_bytes() for n in spec["files"]) == single_file

    summary = result.summary["export"]
    assert result.export_path == summary["path"] == summary["manifest"] == str(out_dir / "result.manifest.json")
    assert summary["shards"] == manifest["shards"] and summary["rows"] == 20
    assert summary["checksum_xxh3_128"] == xxhash.xxh3_128_hexdigest(single_file)
    (done,) = [e for e in read_events(result.job_dir) if e["event_type"] == "export_complete"]
    assert done["manifest"] == summary["manifest"] and done["shards"] == spec["files"]


def test_the_dataset_size_is_the_one_data_juicer_measured() -> None:
    """DJ divided 3435 bytes by the shard size; ours is the same over the exported rows, however chunked."""
    table = pa.Table.from_pylist(_read_jsonl(FIX / "expected" / "one_shard" / "result-00-of-01.jsonl"))
    assert {v["dataset_nbytes"] for v in SPEC["variants"].values()} == {table.nbytes}
    assert table_nbytes([table]) == table.nbytes
    assert table_nbytes([table.slice(0, 7), table.slice(7, 7), table.slice(14)]) == table.nbytes


def test_arrow_size_does_not_depend_on_the_chunking() -> None:
    rng = random.Random(5)
    for _ in range(25):
        n = rng.randint(1, 40)
        rows = [
            {
                "i": rng.choice([None, 1, 2]),
                "s": rng.choice([None, "x" * rng.randint(0, 9), "中文"]),
                "b": rng.choice([True, False, None]),
                "l": rng.choice([None, [1, 2], [], [3, None]]),
                "st": rng.choice([None, {"x": "yy", "y": [1.5]}, {"x": None, "y": None}]),
                "f": rng.random(),
            }
            for _ in range(n)
        ]
        table = pa.Table.from_pylist(rows)
        cuts = sorted({0, n, *(rng.randint(1, n) for _ in range(rng.randint(0, 4)))})
        pieces = [table.slice(a, b - a) for a, b in zip(cuts, cuts[1:])]
        assert table_nbytes(pieces) == table.nbytes


def test_rules_follow_data_juicer() -> None:
    assert shard_count(3435, 20, 1500) == 3 and shard_count(3435, 20, 1 << 20) == 1
    assert shard_count(3435, 20, 1) == 20 and shard_count(0, 0, 10) == 0
    assert shard_bounds(20, 3) == [(0, 7), (7, 14), (14, 20)] and shard_bounds(0, 0) == []
    assert shard_names("/d/out.jsonl", 9)[-1] == "out-08-of-09.jsonl"
    assert shard_names("/d/out.jsonl", 10)[0] == "out-000-of-010.jsonl"
    assert shard_names("/d/my.data.JSONL", 1) == ["my-00-of-01.jsonl"]  # local: the stem ends at the first dot
    assert shard_names("s3://b/p/my.data.jsonl", 1) == ["my.data-00-of-01.jsonl"]  # s3: only the suffix goes
    assert manifest_path("/d/my.data.jsonl") == "/d/my.manifest.json"


def test_parquet_shards_hold_data_juicers_rows(tmp_path: Path) -> None:
    spec = SPEC["variants"]["three_shards"]
    _run(_recipe(tmp_path, spec["export_shard_size"], export="result.parquet"), "pq")
    out_dir = tmp_path / "out"
    names = [n.replace(".jsonl", ".parquet") for n in spec["files"]]
    assert _files(out_dir) == sorted([*names, "result.manifest.json"])
    for name, dj_name in zip(names, spec["files"]):
        assert pq.read_table(out_dir / name).to_pylist() == _read_jsonl(FIX / "expected" / "three_shards" / dj_name)
    manifest = json.loads((out_dir / "result.manifest.json").read_text())
    assert [s["rows"] for s in manifest["shards"]] == spec["rows"]
    for s in manifest["shards"]:
        assert xxhash.xxh3_128_hexdigest((out_dir / s["file"]).read_bytes()) == s["xxh3_128"]


def _night1(tmp_path: Path) -> tuple[Path, dict]:
    """A committed three-shard set, plus a user's file beside it that the manifest does not name."""
    _run(_recipe(tmp_path, SPEC["variants"]["three_shards"]["export_shard_size"]), "night1")
    out_dir = tmp_path / "out"
    (out_dir / "result-99-of-99.jsonl").write_text("a user's file\n")
    return out_dir, _check_manifest(out_dir, "night1")


def _with_fault(tmp_path: Path, job_id: str, faults: list[dict]):
    recipe = _recipe(tmp_path, 1)  # night 2 asks for 20 shards
    job = prepare_job(load_recipe(recipe), job_id=job_id)
    (Path(job.job_dir) / FAULT_FILE).write_text(json.dumps(faults))
    return recipe, job


def test_a_fault_mid_shard_leaves_the_previous_set_and_a_resume_commits_the_new_one(tmp_path: Path) -> None:
    out_dir, before = _night1(tmp_path)
    files_before = {n: (out_dir / n).read_bytes() for n in _files(out_dir)}
    recipe, job = _with_fault(tmp_path, "night2", [{"point": "export_mid", "times": 1, "kind": "raise"}])
    with pytest.raises(InjectedFault):
        run_prepared_job(job)
    assert {n: (out_dir / n).read_bytes() for n in _files(out_dir)} == files_before  # nothing staged is left
    assert _check_manifest(out_dir, "night1") == before

    _run(recipe, "night2", resume="night2")
    after = _check_manifest(out_dir, "night2")
    names = SPEC["variants"]["capped_at_rows"]["files"]
    assert [s["file"] for s in after["shards"]] == names
    # Night 1's shards are gone (its manifest named them); the user's file is not ours and stays.
    assert _files(out_dir) == sorted([*names, "result-99-of-99.jsonl", "result.manifest.json"])


def test_a_full_disk_mid_shard_names_the_shard_and_keeps_the_previous_set(tmp_path: Path, monkeypatch) -> None:
    out_dir, before = _night1(tmp_path)
    files_before = {n: (out_dir / n).read_bytes() for n in _files(out_dir)}
    recipe, job = _with_fault(tmp_path, "night2", [])
    monkeypatch.setenv("DJ_STORAGE_ENOSPC", "result-005-of-020")
    with pytest.raises(OSError) as err:
        run_prepared_job(job)
    assert "No space left on device" in str(err.value) and "result-005-of-020.jsonl" in str(err.value)
    assert {n: (out_dir / n).read_bytes() for n in _files(out_dir)} == files_before
    assert _check_manifest(out_dir, "night1") == before

    monkeypatch.delenv("DJ_STORAGE_ENOSPC")
    _run(recipe, "night2", resume="night2")
    assert len(_check_manifest(out_dir, "night2")["shards"]) == 20


def test_a_crash_before_the_manifest_leaves_no_manifest_and_the_resume_completes(tmp_path: Path) -> None:
    out_dir, _ = _night1(tmp_path)
    recipe, job = _with_fault(tmp_path, "night2", [{"point": "export_commit", "times": 1, "kind": "raise"}])
    with pytest.raises(InjectedFault):
        run_prepared_job(job)
    # Between the shards and the manifest: no manifest says anything, so no reader trusts a half set.
    assert not (out_dir / "result.manifest.json").exists()
    assert (out_dir / ".result.manifest.json.retiring").exists()

    _run(recipe, "night2", resume="night2")
    names = SPEC["variants"]["capped_at_rows"]["files"]
    assert [s["file"] for s in _check_manifest(out_dir, "night2")["shards"]] == names
    assert _files(out_dir) == sorted([*names, "result-99-of-99.jsonl", "result.manifest.json"])


def test_a_completed_sharded_job_is_verified_against_its_manifest(tmp_path: Path) -> None:
    out_dir, _ = _night1(tmp_path)
    job_dir = str(tmp_path / "work" / "night1")
    assert verify_completed_export(job_dir)["export"]["rows"] == 20
    again = _run(_recipe(tmp_path, SPEC["variants"]["three_shards"]["export_shard_size"]), "night1")
    assert again.already_complete
    shard = out_dir / "result-01-of-03.jsonl"
    shard.write_bytes(shard.read_bytes().replace(b"a", b"b", 1))
    with pytest.raises(ExportMismatchError, match="result-01-of-03.jsonl changed since the export"):
        verify_completed_export(job_dir)


@pytest.mark.parametrize(("value", "size"), [("0", 0), ("-5", 0), ("4096", 4096), ("1048576.0", 1048576)])
def test_the_key_is_whole_bytes_and_zero_or_less_is_one_file(tmp_path: Path, value: str, size: int) -> None:
    recipe = _recipe(tmp_path, None)
    recipe.write_text(recipe.read_text().replace("process:", f"export_shard_size: {value}\nprocess:"))
    loaded = load_recipe(recipe)
    assert loaded.export_shard_size == size
    assert ("export_shard_size" in loaded.to_dict()) == (size > 0)


def test_a_fractional_size_is_refused(tmp_path: Path) -> None:
    with pytest.raises(RecipeError, match="whole number of bytes"):
        load_recipe(_recipe(tmp_path, "1.5"))  # type: ignore[arg-type]


def test_parallel_parts_give_the_same_shards(tmp_path: Path) -> None:
    """The Ray workers' part files (made here by calling the workers' function in-process), copied in
    order, are cut into the same shards as this process's own serialization."""
    from airflow_provider_dj.engine.execution.segment_runner import run_segment
    from airflow_provider_dj.engine.job.export import export_job
    from airflow_provider_dj.engine.output.parts import write_part

    spec = SPEC["variants"]["three_shards"]
    job = prepare_job(load_recipe(_recipe(tmp_path, spec["export_shard_size"])), job_id="parts")
    for pid in range(3):
        run_segment(job.job_dir, 0, pid)
    out_dir = tmp_path / "out"
    export_job(job.job_dir)
    sequential = {n: (out_dir / n).read_bytes() for n in spec["files"]}
    made: list[int] = []

    def part_source():
        for pid in range(3):
            made.append(pid)
            yield write_part(job.job_dir, pid)

    for n in spec["files"]:
        (out_dir / n).unlink()
    export_job(job.job_dir, part_source=part_source)
    assert made == [0, 1, 2]
    assert {n: (out_dir / n).read_bytes() for n in spec["files"]} == sequential
    assert _files(out_dir) == sorted([*spec["files"], "result.manifest.json"])


def test_a_resume_cannot_change_the_shard_size(tmp_path: Path) -> None:
    from airflow_provider_dj.engine.job.resume import ResumeRefusedError

    recipe, job = _with_fault(tmp_path, "night", [{"point": "export_mid", "times": 1, "kind": "raise"}])
    with pytest.raises(InjectedFault):
        run_prepared_job(job)
    with pytest.raises(ResumeRefusedError, match="export_shard_size"):
        _run(_recipe(tmp_path, 1500), "night", resume="night")


def test_a_sharded_exports_asset_event_names_the_manifest_without_an_override() -> None:
    pytest.importorskip("airflow")
    from airflow_provider_dj.dag_builder.assets import export_event_extra

    result = {"export_path": "/d/result.manifest.json", "manifest": "/d/result.manifest.json"}
    result.update(rows=20, checksum="c", job_id="j")
    extra = export_event_extra(result, recipe_name="r", declared_export_path="/d/result.jsonl", context={})
    assert (extra["export_path"], extra["export_path_overridden"]) == ("/d/result.manifest.json", False)
    moved = export_event_extra(
        {**result, "export_path": "/e/result.manifest.json"},
        recipe_name="r",
        declared_export_path="/d/result.jsonl",
        context={},
    )
    assert moved["export_path_overridden"] is True


def test_the_writer_commits_on_an_object_store_and_retires_the_previous_set() -> None:
    """On an fsspec URL (memory://: upload on close, copy for rename) with bytes arriving in pieces that
    cut rows in two; a night of 2 shards after one of 3 leaves only its own."""
    from airflow_provider_dj.core import fs as storage
    from airflow_provider_dj.engine.output.shards import ShardSetWriter, read_manifest, verify_shard_set

    data = b"".join(b'{"i": %d}\n' % i for i in range(10))
    root = "memory://dj-shards-test/out"
    for night, count in (("n1", 3), ("n2", 2)):
        writer = ShardSetWriter(f"{root}/my.data.jsonl", shard_bounds(10, count), job_id=night, shard_size=5)
        for piece in (data[:13], data[13:14], data[14:]):
            writer.write(piece)
        manifest = writer.commit(total_rows=10, checksum=xxhash.xxh3_128_hexdigest(data))
    assert storage.listdir(root) == ["my-00-of-02.jsonl", "my-01-of-02.jsonl", "my.manifest.json"]
    assert [s["rows"] for s in manifest["shards"]] == [5, 5]
    assert b"".join(storage.read_bytes(f"{root}/{s['file']}") for s in manifest["shards"]) == data
    assert read_manifest(f"{root}/my.manifest.json")["job_id"] == "n2"
    verify_shard_set({"manifest": f"{root}/my.manifest.json", "shards": manifest["shards"]})
    storage.remove_tree("memory://dj-shards-test")


def test_a_single_file_night_after_a_sharded_one_takes_the_set_down(tmp_path: Path, single_file: bytes) -> None:
    out_dir, _ = _night1(tmp_path)
    _run(_recipe(tmp_path, 0), "night2")
    assert _files(out_dir) == ["result-99-of-99.jsonl", "result.jsonl"]
    assert_same_bytes((out_dir / "result.jsonl").read_bytes(), single_file)


def test_a_manifest_name_held_by_a_file_not_ours_is_refused_before_writing(tmp_path: Path) -> None:
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    (out_dir / "result.manifest.json").write_text('{"mine": true}')
    with pytest.raises(ExportMismatchError, match="not a shard manifest this engine wrote"):
        _run(_recipe(tmp_path, 1500), "night1")
    assert _files(out_dir) == ["result.manifest.json"]
    assert (out_dir / "result.manifest.json").read_text() == '{"mine": true}'


def test_openlineage_reads_a_sharded_exports_fields_from_its_first_shard(tmp_path: Path) -> None:
    from airflow_provider_dj.openlineage_facets.job_facts import read_job_facts

    result = _run(_recipe(tmp_path, SPEC["variants"]["three_shards"]["export_shard_size"]), "night1")
    export = read_job_facts(result.job_dir).export
    assert export.written and export.rows == 20 and export.dataset.name.endswith("result.manifest.json")
    assert sorted(f.name for f in export.dataset.fields) == ["id", "meta", "text"]
